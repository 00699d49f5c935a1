package codingagent

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pinnedCodex is the Codex CLI release these tests drive (package.json
// pins the same).
const pinnedCodex = "0.171.0"

// codexAgent is Codex set up for one test: its own HOME with the fake
// model as its provider and docs/coding-agents.md's hooks.json, with the
// built binary for countersign, and a project directory.
type codexAgent struct {
	t       *testing.T
	serve   *serveProc
	model   *fakeResponses
	home    string
	project string
}

func newCodexAgent(t *testing.T, p *serveProc) *codexAgent {
	a := &codexAgent{t: t, serve: p, model: newFakeResponses(t), home: t.TempDir(), project: t.TempDir()}
	dir := filepath.Join(a.home, ".codex")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`model = %q
model_provider = "countersign-test"

[model_providers.countersign-test]
name = "scripted model"
base_url = %q
env_key = "CODEX_TEST_API_KEY"
wire_api = "responses"
`, a.model.model, a.model.srv.URL+"/v1")
	for name, body := range map[string]string{"config.toml": config, "hooks.json": a.hooks()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// hooks is the Codex hooks.json of docs/coding-agents.md, as written, with
// the built binary for countersign and a shorter --wait.
func (a *codexAgent) hooks() string {
	a.t.Helper()
	doc, err := os.ReadFile("../../docs/coding-agents.md")
	if err != nil {
		a.t.Fatal(err)
	}
	_, codex, _ := strings.Cut(string(doc), "\n## Codex\n")
	_, block, ok := strings.Cut(codex, "```json\n")
	block, _, _ = strings.Cut(block, "```")
	const command = `"command": "countersign hook --for codex --wait 10m"`
	if !ok || !strings.Contains(block, command) {
		a.t.Fatalf("docs/coding-agents.md: the first json block under ## Codex is not the hooks.json this test runs:\n%s", block)
	}
	quoted, _ := json.Marshal(binary + " hook --for codex --wait 2m")
	block = strings.Replace(block, command, `"command": `+string(quoted), 1)
	if !json.Valid([]byte(block)) {
		a.t.Fatalf("docs/coding-agents.md: the hooks.json is not JSON:\n%s", block)
	}
	return block
}

// run runs `codex exec` in the project until the model's script is done;
// trusted adds --dangerously-bypass-hook-trust, which stands here for a
// hook the user reviewed and trusted in /hooks. The sandbox is off: the
// project is a test directory, and the machine may lack what Codex's
// sandbox needs.
func (a *codexAgent) start(trusted bool) (wait func() string) {
	a.t.Helper()
	args := []string{"exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "-C", a.project}
	if trusted {
		args = append(args, "--dangerously-bypass-hook-trust")
	}
	cmd := exec.Command(codexBin(a.t), append(args, "Do what the task needs.")...)
	cmd.Dir = a.project
	cmd.Env = append(os.Environ(), "HOME="+a.home, "CODEX_TEST_API_KEY="+a.model.key,
		"COUNTERSIGN_URL="+a.serve.url, "COUNTERSIGN_TOKEN="+a.serve.token)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	startAgent(a.t, cmd)
	return func() string {
		a.t.Helper()
		if err := cmd.Wait(); err != nil {
			a.t.Fatalf("codex exec: %v\n%s", err, &out)
		}
		if !strings.Contains(out.String(), closingText) {
			a.t.Fatalf("codex exec ended without the model's closing message:\n%s", &out)
		}
		return out.String()
	}
}

// exists reports whether the project has path.
func (a *codexAgent) exists(path string) bool {
	_, err := os.Stat(filepath.Join(a.project, path))
	return err == nil
}

func (a *codexAgent) write(path, body string) {
	a.t.Helper()
	full := filepath.Join(a.project, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(body), 0o600); err != nil {
		a.t.Fatal(err)
	}
}

// The real Codex CLI with docs/coding-agents.md's hooks.json: a command the
// policy refuses never runs, and the model is told why.
func TestCodexDeniedCommandNeverRuns(t *testing.T) {
	a := newCodexAgent(t, startServe(t))
	a.write(".env", "API_KEY=sk-live-should-never-be-read\n")
	a.model.play("cat .env")
	out := a.start(true)()
	told := a.model.output()
	if strings.Contains(told, "sk-live") || strings.Contains(out, "sk-live") {
		t.Fatalf("the secret was read:\n%s", told)
	}
	if !strings.Contains(told, "may not read, write or search credentials") {
		t.Fatalf("the model was not told the policy's reason; it got:\n%s\ncodex:\n%s", told, out)
	}
}

// chained is a command the policy reads in no shape it allows (two
// commands chained): it waits for a human (bash-other).
const chained = "mkdir made && touch made/ok"

// A command that waits for a human does not run until one approves it;
// then it runs, once.
func TestCodexApprovedCommandRunsAfterTheHumanSaysYes(t *testing.T) {
	p := startServe(t)
	a := newCodexAgent(t, p)
	a.model.play(chained)
	wait := a.start(true)
	id := p.pendingApproval(t, "")
	if a.exists("made") {
		t.Fatal("the command ran before anyone approved it")
	}
	p.cli(t, "approvals", "approve", id, "--comment", "fine")
	wait()
	if !a.exists("made/ok") {
		t.Fatalf("the approved command did not run; the model was told:\n%s", a.model.output())
	}
	var rec struct {
		Record struct {
			Status string `json:"status"`
			Claim  *struct {
				By string `json:"by"`
			} `json:"claim"`
		} `json:"record"`
	}
	if err := json.Unmarshal([]byte(p.cli(t, "approvals", "show", id, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Record.Status != "approved" || rec.Record.Claim == nil {
		t.Fatalf("record: %+v, want approved and claimed by the hook before the command ran", rec.Record)
	}
}

// What docs/coding-agents.md warns of: Codex runs a hook only once the
// user has trusted it (/hooks); an untrusted hook is skipped, and the
// command runs with no one asked.
func TestCodexSkipsAHookNobodyTrusted(t *testing.T) {
	p := startServe(t)
	a := newCodexAgent(t, p)
	a.model.play(chained)
	a.start(false)()
	if !a.exists("made/ok") {
		t.Fatal("the command did not run: Codex now runs untrusted hooks, and docs/coding-agents.md needs changing")
	}
	if out := p.cli(t, "approvals", "ls", "--status", "all", "--json"); strings.Contains(out, `"event_id"`) {
		t.Fatalf("an approval was asked for, so the untrusted hook ran:\n%s", out)
	}
}
