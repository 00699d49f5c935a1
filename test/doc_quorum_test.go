package test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/orchestrator/directory"
)

// TestQuorumWalkthroughRuns runs docs/quorum.md's "two of three" as
// written, from a directory holding bin/countersign, deploy/ and ./data:
// the script that makes alice, bob and carol a directory with tokens; serve
// with that directory; the demo policy linted, tested and applied; the
// review that waits; carol refused as the requester, alice counted, bob
// deciding; and the second request rejected by one veto. Each output the
// document shows (in comments after a command, or in the blocks that
// follow) is checked.
func TestQuorumWalkthroughRuns(t *testing.T) {
	d := readDocExamples(t, "docs/quorum.md", "")
	sh := quorumShell(t)
	sh.bash(t, d.take(t, "sh", "data/quorum/approvers.yaml", "token new").text)
	dir, err := directory.Load(filepath.Join(sh.dir, "data", "quorum", "approvers.yaml"))
	if err != nil {
		t.Fatalf("the script's directory: %v", err)
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		if _, ok := dir.User(u); !ok {
			t.Errorf("the script's directory lists no %s", u)
		}
	}

	// serve, as the document starts it (the configuration's policy,
	// ./deploy/policy.yaml, named from test/).
	serveCmd := d.take(t, "sh", "serve --config").shell(t)
	if want := "bin/countersign serve --config deploy/countersign.yaml --directory data/quorum/approvers.yaml"; len(serveCmd) != 1 || strings.Join(serveCmd[0], " ") != want {
		t.Fatalf("want `%s`, got %q", want, serveCmd)
	}
	p := startServeBinary(t, binary, filepath.Join(sh.dir, "data"), "--config", "../deploy/countersign.yaml",
		"--policy", "../deploy/policy.yaml", "--directory", filepath.Join(sh.dir, "data", "quorum", "approvers.yaml"))
	sh.p = p

	// The demo policy, linted, tested, applied; the answer shown.
	var out string
	for _, cmd := range d.take(t, "sh", "policy apply").shell(t) {
		out = sh.run(t, cmd)
	}
	// The revision is the policy bucket's, which other writes move.
	revision := regexp.MustCompile(`\(revision \d+\)`)
	shown := strings.TrimSpace(d.take(t, "", "Applied policy version").text)
	if !strings.Contains(revision.ReplaceAllString(out, "(revision N)"), revision.ReplaceAllString(shown, "(revision N)")) {
		t.Errorf("policy apply printed:\n%s\ndocs/quorum.md shows:\n%s", out, shown)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quorumFirstRequest(ctx, t, d, sh)
	quorumVeto(ctx, t, d, sh)
	d.allRun(t)
}

// quorumShell is a directory as the reader's checkout: bin/countersign,
// deploy/ and an empty ./data, for the serve the test starts later.
func quorumShell(t *testing.T) *docShell {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	deploy, err := filepath.Abs("../deploy")
	if err != nil {
		t.Fatal(err)
	}
	for _, mk := range []error{os.Mkdir(filepath.Join(dir, "bin"), 0o755), os.Mkdir(filepath.Join(dir, "data"), 0o755),
		os.Symlink(abs, filepath.Join(dir, "bin", "countersign")), os.Symlink(deploy, filepath.Join(dir, "deploy"))} {
		if mk != nil {
			t.Fatal(mk)
		}
	}
	return &docShell{dir: dir, addr: "127.0.0.1:8080", vars: map[string]string{}}
}

// quorumFirstRequest: the review waits while carol is refused and alice
// counted, answers once bob approves, as shown.
func quorumFirstRequest(ctx context.Context, t *testing.T, d *docExamples, sh *docShell) {
	t.Helper()
	ask := d.take(t, "sh", "run-q1").shell(t)
	if len(ask) != 2 || strings.Join(ask[0], " ") != "export TOKEN=$(cat data/dev-token)" {
		t.Fatalf("want `export TOKEN=$(cat data/dev-token)` and a curl, got %q", ask)
	}
	ch := followChanges(t, sh.p)
	waited := make(chan httpAnswer, 1)
	go func() { waited <- sh.curl(ctx, t, ask[1]) }()
	id := pendingOf(t, sh.p, ch, "run-q1", 1)[0]
	runShown(ctx, t, sh, d.take(t, "sh", "ID=<event_id>").text, map[string]string{"ID": id})
	out, _ := sh.bashErr("bin/countersign approvals show " + id)
	for _, line := range strings.Split(d.take(t, "", "Quorum:").text, "\n") {
		if line = strings.Join(strings.Fields(line), " "); line != "" && line != "…" && !strings.Contains(strings.Join(strings.Fields(out), " "), line) {
			t.Errorf("approvals show does not say %q:\n%s", line, out)
		}
	}
	select {
	case a := <-waited:
		t.Fatalf("the review answered before bob voted: %d %s", a.status, a.body)
	default:
	}
	runShown(ctx, t, sh, d.take(t, "sh", "bob.token) bin/countersign approvals approve $ID\n").text, map[string]string{"ID": id})
	a := <-waited
	var shown, got reviewAnswerJSON
	if err := json.Unmarshal([]byte(d.take(t, "json", "payments-two-of-finance").text), &shown); err != nil {
		t.Fatal(err)
	}
	a.decode(t, &got)
	matchShown(t, "docs/quorum.md", shown, got)
}

// quorumVeto: a second request, one approval, then bob's rejection closes
// it; carol's vote comes too late.
func quorumVeto(ctx context.Context, t *testing.T, d *docExamples, sh *docShell) {
	t.Helper()
	runShown(ctx, t, sh, d.take(t, "sh", "run-q2").text, nil)
	if st := sh.p.status(t, sh.vars["ID2"]); st != "rejected" {
		t.Errorf("the second request is %s, want rejected", st)
	}
}

// placeholder is a line that sets a variable to what the reader reads off
// an earlier answer: ID=<event_id>.
var placeholder = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=<[^>]+>$`)

// runShown runs a block's commands one by one, each as bash runs it (a
// curl as the test's HTTP request), and checks the output each shows in
// the comment lines after it; "countersign: …" is a refusal. A
// placeholder line takes its value from values, or from the event_id of
// the last curl's first result.
func runShown(ctx context.Context, t *testing.T, sh *docShell, block string, values map[string]string) {
	t.Helper()
	lastEvent := ""
	for _, c := range docCommands(block) {
		if m := placeholder.FindStringSubmatch(c.text); m != nil {
			v, ok := values[m[1]]
			if !ok {
				v = lastEvent
			}
			sh.vars[m[1]] = v
			continue
		}
		var out string
		var err error
		if strings.HasPrefix(c.text, "curl ") {
			cmds, perr := shellWords(c.text)
			if perr != nil || len(cmds) != 1 {
				t.Fatalf("%s: %v", c.text, perr)
			}
			a := sh.curl(ctx, t, cmds[0])
			var ans reviewAnswerJSON
			a.decode(t, &ans)
			if a.status != http.StatusOK || len(ans.Results) == 0 {
				t.Fatalf("%s: %d %s", c.text, a.status, a.body)
			}
			lastEvent, _ = ans.Results[0]["event_id"].(string)
			out = string(a.body)
		} else {
			out, err = sh.bashErr(c.text)
		}
		for _, want := range c.shown {
			want = strings.ReplaceAll(want, "<event_id>", lastVar(sh, c.text))
			refusal := strings.HasPrefix(want, "countersign: ")
			if !strings.Contains(out, want) || refusal != (err != nil) {
				t.Errorf("%s\nprinted (%v):\n%s\ndocs/quorum.md shows: %s", c.text, err, out, want)
			}
		}
		if len(c.shown) == 0 && err != nil {
			t.Errorf("%s: %v\n%s", c.text, err, out)
		}
	}
}

// lastVar is the value of the $VAR a command names last.
func lastVar(sh *docShell, cmd string) string {
	vs := regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)\b`).FindAllStringSubmatch(cmd, -1)
	if len(vs) == 0 {
		return ""
	}
	return sh.vars[vs[len(vs)-1][1]]
}

// docCommand is one command of a shell block as written, and the comment
// lines right after it: the output the document shows for it.
type docCommand struct {
	text  string
	shown []string
}

// docCommands splits a shell block into its commands: a line, with the
// lines a backslash or an open single quote carries on.
func docCommands(block string) []docCommand {
	var out []docCommand
	cur := ""
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && strings.HasPrefix(trimmed, "#") {
			if len(out) > 0 {
				out[len(out)-1].shown = append(out[len(out)-1].shown, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			}
			continue
		}
		if cur == "" && trimmed == "" {
			continue
		}
		cur += line + "\n"
		if strings.Count(cur, "'")%2 == 0 && !strings.HasSuffix(trimmed, "\\") {
			out = append(out, docCommand{text: strings.TrimSpace(cur)})
			cur = ""
		}
	}
	return out
}
