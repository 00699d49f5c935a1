package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	csclient "github.com/countersign/countersign/contracts/client"
)

const hookAbout = `Reads one PreToolUse event of a coding agent's permission hook on stdin
  (Claude Code; Codex with --for codex), reviews the tool call against the
  policy as the tool TOOL_NAME (Bash, Edit, Write, Read, WebFetch,
  mcp__server__tool, ...) with tool_input as its arguments, for the agent
  --agent, in the run session_id, as the tool call tool_use_id, and prints
  the decision on stdout:
    allowed by the policy        allow at once
    denied, rejected, responded  deny, with the reason for the model
    held for a human             wait up to --wait; approved: claim, then
                                 allow (a human's edit as updatedInput);
                                 not decided in time: withdraw the request,
                                 deny "not approved within 10m; ask again"
  An approved call is claimed before it is allowed: the same tool_use_id
  seen again (a resumed or retried session) is denied as already run.
  Every failure denies (fail closed): Countersign unreachable after
  --retry-for, a malformed event. A failure before an event could be read
  exits 2 with the reason on stderr, which both agents take as a block.
  A PostToolUse event (the tool ran) reports the outcome of the session's
  claimed approval of that tool use, once, and prints nothing.
  Run labels for the policy: hook.cwd (the project directory),
  hook.host, hook.permission_mode, hook.agent_type. Countersign is found
  through --url/--token, COUNTERSIGN_URL and COUNTERSIGN_TOKEN, or the local
  serve's ./data, as for the other commands. See docs/coding-agents.md.
`

// hookFlags are the flags of `countersign hook`.
type hookFlags struct {
	conn                      func() (*client, error)
	host, agent, requestedBy  string
	tenant                    string
	labels                    listFlag
	wait, retryFor, cancelFor time.Duration
}

// parseHookFlags parses the arguments of `countersign hook`.
func parseHookFlags(args []string, stdout io.Writer) (*hookFlags, error) {
	fs := newFlagSet("hook", stdout)
	f := &hookFlags{conn: clientFlags(fs.FlagSet), cancelFor: 10 * time.Second}
	fs.StringVar(&f.host, "for", hostClaudeCode, "the agent whose hook protocol to speak: claude-code or codex")
	fs.StringVar(&f.agent, "agent", "", "agent name of the reviews (default: the --for value)")
	fs.StringVar(&f.requestedBy, "requested-by", os.Getenv("COUNTERSIGN_REQUESTED_BY"), "the person the agent works for (default $COUNTERSIGN_REQUESTED_BY)")
	fs.StringVar(&f.tenant, "tenant", "", "the runs' tenant")
	fs.Var(&f.labels, "label", "KEY=VALUE run label for the policy (repeatable)")
	fs.DurationVar(&f.wait, "wait", envDuration("COUNTERSIGN_HOOK_WAIT", 10*time.Minute), "how long a held call waits for a human (default $COUNTERSIGN_HOOK_WAIT, else 10m); keep the hook's timeout above it")
	fs.DurationVar(&f.retryFor, "retry-for", 30*time.Second, "how long Countersign may be unreachable before the call is denied")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("hook: unexpected argument %q (the event comes on stdin)", fs.Arg(0))
	}
	if f.host != hostClaudeCode && f.host != hostCodex {
		return nil, fmt.Errorf("hook: --for %q: want %s or %s", f.host, hostClaudeCode, hostCodex)
	}
	if f.wait <= 0 || f.retryFor <= 0 {
		return nil, errors.New("hook: --wait and --retry-for must be positive")
	}
	if f.agent == "" {
		f.agent = f.host
	}
	return f, nil
}

// envDuration is the duration in the environment variable name, or def.
// A value that does not parse is left to the flag's own check: it yields
// zero, which parseHookFlags refuses.
func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0
	}
	return d
}

// cmdHook runs `countersign hook` (see hookAbout). A decision is printed on
// stdout with exit status 0; a failure before the event could be read exits
// 2 with the reason on stderr, as both agents read a blocking answer.
func cmdHook(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f, err := parseHookFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		fmt.Fprintf(stderr, "countersign hook: %v; the call did not run\n", err)
		return exitError(2)
	}
	in, err := readHookInput(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "countersign hook: %v; the call did not run\n", err)
		return exitError(2)
	}
	ctx := context.Background()
	if in.HookEventName == eventPostToolUse {
		f.report(ctx, in, stderr)
		return nil // nothing to decide: the tool ran
	}
	d := f.decide(ctx, in, stderr)
	out, err := encodeHookDecision(f.host, d)
	if err != nil {
		fmt.Fprintf(stderr, "countersign hook: %v; the call did not run\n", err)
		return exitError(2)
	}
	_, err = stdout.Write(out)
	return err
}

// decide reviews the call of in and returns what the agent is told.
func (f *hookFlags) decide(ctx context.Context, in *hookInput, stderr io.Writer) hookDecision {
	labels, err := f.runLabels(in)
	if err != nil {
		return denyf("Countersign: %v. The call did not run.", err)
	}
	c, err := f.conn()
	if err != nil {
		return denyf("Countersign is not configured (%v). The call did not run.", err)
	}
	cs, err := csclient.New(csclient.Config{URL: c.url, Token: c.token, RetryFor: f.retryFor})
	if err != nil {
		return denyf("Countersign is not configured (%v). The call did not run.", err)
	}
	g := &hookGate{cs: cs, flags: f, stderr: stderr,
		run:  contracts.Run{ID: in.SessionID, Agent: f.agent, RequestedBy: f.requestedBy, Tenant: f.tenant, Labels: labels},
		call: csclient.ToolCall{ID: in.ToolUseID, Name: in.ToolName, Arguments: in.ToolInput}}
	return g.decide(ctx)
}

// runLabels are the run's labels: --label values, then what the event says.
func (f *hookFlags) runLabels(in *hookInput) (map[string]string, error) {
	lbl := map[string]string{}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", kv)
		}
		lbl[k] = v
	}
	lbl[labelHookHost] = f.host
	lbl[labelHookCwd] = in.Cwd
	if in.PermissionMode != "" {
		lbl[labelHookPermissionMode] = in.PermissionMode
	}
	if in.AgentType != "" {
		lbl[labelHookAgentType] = in.AgentType
	}
	return lbl, nil
}
