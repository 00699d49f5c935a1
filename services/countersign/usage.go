package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one command of the CLI as its usage shows it.
type command struct {
	// path is the command's words after "countersign": "approvals show".
	path string
	// synopsis is what follows the path: the arguments and the flags worth
	// showing in the overview. "[flags]" stands for the flags --help lists.
	synopsis string
	// about says what the command does, in one line.
	about string
	// long, when set, is printed by --help after the synopsis.
	long string
}

// commands is every command, in the order the usage lists them. Each
// command's --help prints its line and the flags of its real flag set; a
// test holds the two together.
var commands = []command{
	{path: "serve", synopsis: "[flags]", about: "run every role with an embedded NATS server (data under ./data)"},
	{path: "stop", synopsis: "[--data DIR] [--kill] [--timeout 30s]", about: "stop the serve that owns the data directory (--kill: SIGKILL, as a crash)"},
	{path: "approvals ls", synopsis: "[--status S] [--agent A] [--run R] [--mine] [--limit N]", about: "list approvals (pending by default)"},
	{path: "approvals show", synopsis: "ID [--wait 30s]", about: "one approval: request, quorum, votes, outcome"},
	{path: "approvals approve", synopsis: "ID [ID…] | --run RUN [--agent A] [--comment TEXT] [--grant run|agent --ttl 2h [--when COND]]", about: "approve one, several, or every pending call of a run you may decide; --grant also approves the same tool for the run or the agent, revocably"},
	{path: "approvals reject", synopsis: "ID [ID…] | --run RUN [--agent A] --reason TEXT [--comment TEXT]", about: "reject one, several, or a run's pending calls; the reason goes back to the agent"},
	{path: "approvals edit", synopsis: "ID --args FILE | --json '{...}' [--comment TEXT]", about: "approve with new arguments (shows the diff)"},
	{path: "approvals respond", synopsis: `ID "TEXT"`, about: "no execution; TEXT is the agent's tool result"},
	{path: "approvals answer", synopsis: "ID --json '{...}' | --text TEXT | --decline | --cancel [--comment TEXT]", about: "answer a question"},
	{path: "approvals extend", synopsis: "ID 2h", about: "move the deadline (or give an RFC 3339 time)"},
	{path: "approvals cancel", synopsis: "ID [--reason TEXT]", about: "cancel a pending approval"},
	{path: "grants ls", synopsis: "[--status active|expired|revoked|all] [--agent A] [--tool T]", about: "standing grants (active by default)"},
	{path: "grants show", synopsis: "ID", about: "one grant and its timeline: who granted, each call that used it"},
	{path: "grants revoke", synopsis: "ID", about: "revoke a grant on every gate at once"},
	{path: "audit", synopsis: "ID [--json]", about: "the full timeline: request, policy, notifications, votes, outcome"},
	{path: "audit export", synopsis: "[--since T] [--until T] [--format native|ocsf] [-o FILE]", about: "the tamper-evident audit log as a bundle: entries, signed checkpoints, keys; or as OCSF events (admins, auditors)"},
	{path: "audit verify", synopsis: "BUNDLE [--keys jwks.json] [--json]", about: "check a bundle offline: names each entry altered, removed, reordered or inserted"},
	{path: "oversight", synopsis: "[--since 30d] [--fast 10s] [--json]", about: "how approvals are decided, per approver and rule (admins, viewers, auditors)"},
	{path: "policy lint", synopsis: "[--directory F] [--strict] FILE...", about: "check syntax, CEL types, unreachable rules, unknown groups"},
	{path: "policy test", synopsis: "POLICY CASES [-v]", about: "run a table of tool calls against a policy"},
	{path: "policy apply", synopsis: "FILE [--dry-run]", about: "validate and make it the fleet's live policy"},
	{path: "policy show", synopsis: "[--source]", about: "the live policy"},
	{path: "policy replay", synopsis: "CANDIDATE [--since 30d] [--until T] [--json] [--quiet]", about: "replay recorded requests against a candidate policy: what would change, per rule (admins, auditors)"},
	{path: "provision", synopsis: "--nats-url URLS [--user U] [--creds FILE] [--replicas N] [--retention D]", about: "create the streams and buckets on an external NATS (as admin)"},
	{path: "demo", synopsis: "[--session NAME] [--no-wait] [--rounds N] [--fleet]", about: "a simulated agent fleet proposing tool calls; run it again to re-attach"},
	{path: "bench", synopsis: "[flags]", about: "measure cycles/s, latency and pending capacity", long: benchAbout},
	{path: "mcp", synopsis: "--name NAME [flags] -- COMMAND [ARGS...] | --listen ADDR --callers FILE --upstream NAME=URL...", about: "an MCP gateway: approvals in front of any MCP server's tools", long: mcpAbout},
	{path: "hook", synopsis: "[--for claude-code|codex] [--wait 10m] [flags] < EVENT", about: "a coding agent's PreToolUse permission hook: each tool use reviewed, held ones wait for a human", long: hookAbout},
	{path: "login", synopsis: "[--url URL] [--timeout 5m]", about: "sign in through the server's identity provider in the browser; the CLI then acts as you"},
	{path: "logout", synopsis: "[--url URL]", about: "forget the sign-in to a server"},
	{path: "token new", synopsis: "--subject ID [--name LABEL] [--roles agent,approver]", about: "a new API token and its hash"},
	{path: "receipts keygen", synopsis: "[--into FILE [--public FILE]]", about: "a new receipt signing key; --into puts it first in a key file (rotation)"},
	{path: "receipts public", synopsis: "FILE", about: "the public keys (JWKS) of a private key file"},
	{path: "version", about: "print the version"},
}

const usageFooter = `
Approval ids may be shortened to a unique prefix of at least 4 characters.
For scripts, every approvals command but edit and answer takes --json and
prints the API's JSON answer instead of text (so do grants, audit and
oversight); a refusal exits with status 1 and the error on stderr.
'countersign COMMAND --help' lists a command's flags. The CLI finds the API
through COUNTERSIGN_URL and COUNTERSIGN_TOKEN (else a 'countersign login'), or,
on the machine that runs 'countersign serve', through ./data (override with
--data or COUNTERSIGN_DATA).
`

// usageText is the CLI's overview: every command whose path starts with
// prefix ("" for all).
func usageText(prefix string) string {
	var b strings.Builder
	if prefix == "" {
		b.WriteString("countersign — durable human approval for AI agent tool calls\n\n")
	}
	b.WriteString("Usage:\n")
	for _, c := range commands {
		if prefix != "" && c.path != prefix && !strings.HasPrefix(c.path, prefix+" ") {
			continue
		}
		line := "  countersign " + strings.TrimSpace(c.path+" "+c.synopsis)
		if len(line) < 46 {
			fmt.Fprintf(&b, "%-46s %s\n", line, c.about)
		} else {
			fmt.Fprintf(&b, "%s\n%-46s %s\n", line, "", c.about)
		}
	}
	b.WriteString(usageFooter)
	return b.String()
}

func findCommand(path string) (command, bool) {
	for _, c := range commands {
		if c.path == path {
			return c, true
		}
	}
	return command{}, false
}

// flagSet is a command's flag set. Parse errors are returned, not printed;
// --help (or -h) prints the command's usage and flags to the command's
// output and returns flag.ErrHelp, which exits 0.
type flagSet struct {
	*flag.FlagSet
	path string
	out  io.Writer
}

func newFlagSet(path string, out io.Writer) *flagSet {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, path: path, out: out}
}

func (f *flagSet) Parse(args []string) error {
	err := f.FlagSet.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.printHelp()
		return err
	case err != nil:
		return fmt.Errorf("%s: %w (see 'countersign %s --help')", f.path, err, f.path)
	}
	return nil
}

func (f *flagSet) printHelp() {
	c, _ := findCommand(f.path)
	fmt.Fprintf(f.out, "Usage: countersign %s\n\n", strings.TrimSpace(f.path+" "+c.synopsis))
	if c.about != "" {
		fmt.Fprintf(f.out, "%s.\n", strings.ToUpper(c.about[:1])+c.about[1:])
	}
	if c.long != "" {
		fmt.Fprintf(f.out, "\n%s", c.long)
	}
	n := 0
	f.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(f.out, "\nFlags:")
	f.SetOutput(f.out)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}
