package codingagent

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// agent is Claude Code set up for one test: its own HOME, a project
// directory, the fake model, and `countersign hook` as its PreToolUse hook
// for every tool, as docs/coding-agents.md tells users to register it.
type agent struct {
	t       *testing.T
	serve   *serveProc
	model   *fakeModel
	home    string
	project string
	session string
	wait    string
}

func newAgent(t *testing.T, p *serveProc) *agent {
	home, project := t.TempDir(), t.TempDir()
	project, err := filepath.EvalSymlinks(project)
	if err != nil {
		t.Fatal(err)
	}
	return &agent{t: t, serve: p, model: newFakeModel(t), home: home, project: project,
		session: uuid.NewString(), wait: "2m"}
}

// settings are the hook settings of docs/coding-agents.md, as written,
// with the built binary for countersign and the test's --wait.
func (a *agent) settings() string {
	a.t.Helper()
	doc, err := os.ReadFile("../../docs/coding-agents.md")
	if err != nil {
		a.t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```json\n")
	block, _, _ = strings.Cut(block, "```")
	const command = `"command": "countersign hook --wait 10m"`
	if !ok || !strings.Contains(block, command) || !strings.Contains(block, `"onFailure": "block"`) {
		a.t.Fatalf("docs/coding-agents.md: the first json block is not the hook settings this test runs:\n%s", block)
	}
	quoted, _ := json.Marshal(binary + " hook --wait " + a.wait)
	block = strings.Replace(block, command, `"command": `+string(quoted), 1)
	const report = `"command": "countersign hook"`
	if !strings.Contains(block, report) {
		a.t.Fatalf("docs/coding-agents.md: the hook settings do not report outcomes (PostToolUse):\n%s", block)
	}
	quoted, _ = json.Marshal(binary + " hook")
	block = strings.Replace(block, report, `"command": `+string(quoted), 1)
	if !json.Valid([]byte(block)) {
		a.t.Fatalf("docs/coding-agents.md: the settings are not JSON:\n%s", block)
	}
	return block
}

// command is `claude -p PROMPT --output-format json` in the project, with
// extra flags (--session-id or --resume).
func (a *agent) command(prompt string, extra ...string) *exec.Cmd {
	args := append([]string{"-p", prompt, "--output-format", "json", "--model", a.model.model,
		"--settings", a.settings(), "--setting-sources", "", "--max-turns", "6"}, extra...)
	cmd := exec.Command(claudeBin(a.t), args...)
	cmd.Dir = a.project
	cmd.Env = append(os.Environ(), "HOME="+a.home, "ANTHROPIC_BASE_URL="+a.model.srv.URL,
		"ANTHROPIC_API_KEY="+a.model.key, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
		"ANTHROPIC_SMALL_FAST_MODEL="+a.model.model, "ANTHROPIC_DEFAULT_HAIKU_MODEL="+a.model.model,
		"COUNTERSIGN_URL="+a.serve.url, "COUNTERSIGN_TOKEN="+a.serve.token)
	return cmd
}

// result is the JSON Claude Code prints with --output-format json.
type result struct {
	Type      string `json:"type"`
	IsError   bool   `json:"is_error"`
	Result    string `json:"result"`
	SessionID string `json:"session_id"`
}

// finish waits for a started run and decodes its result.
func (a *agent) finish(cmd *exec.Cmd, stdout *strings.Builder, stderr *strings.Builder) result {
	a.t.Helper()
	if err := cmd.Wait(); err != nil {
		a.t.Fatalf("claude: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	var r result
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		a.t.Fatalf("claude printed no JSON result: %v\n%s\nstderr: %s", err, stdout, stderr)
	}
	if r.IsError || r.Result != closingText || r.SessionID != a.session {
		a.t.Fatalf("claude's result: %+v (want %q in session %s)\nstderr: %s", r, closingText, a.session, stderr)
	}
	return r
}

// start starts claude with prompt; finish waits for it.
func (a *agent) start(prompt string, extra ...string) (*exec.Cmd, *strings.Builder, *strings.Builder) {
	a.t.Helper()
	cmd := a.command(prompt, extra...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	startAgent(a.t, cmd)
	return cmd, &stdout, &stderr
}

// runToEnd runs claude with prompt to its end.
func (a *agent) runToEnd(prompt string, extra ...string) result {
	a.t.Helper()
	return a.finish(a.start(prompt, extra...))
}

// resultFor is the tool result the model got for id, the last one if
// there are several.
func (a *agent) resultFor(id string) toolResult {
	a.t.Helper()
	var found *toolResult
	for _, r := range a.model.lastResults(a.t) {
		if r.ID == id {
			found = &r
		}
	}
	if found == nil {
		a.t.Fatalf("the model got no tool result for %s", id)
	}
	return *found
}

// pendingApproval returns the id of the session's pending approval once
// there is one.
func (a *agent) pendingApproval() string {
	a.t.Helper()
	return a.serve.pendingApproval(a.t, a.session)
}
