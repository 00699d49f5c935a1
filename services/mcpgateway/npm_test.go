package mcpgateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// installNPM installs the tests' npm packages from the committed lockfile.
func installNPM(t testing.TB) {
	t.Helper()
	out, err := exec.Command("sh", "testdata/npm/install.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("installing the npm packages: %v\n%s", err, out)
	}
}

// The TypeScript SDK client and the real filesystem server from npm, with
// `countersign mcp` between them as an MCP client's config would launch it:
// read-only tools run at once, write_file (destructive) waits with
// progress — twice as long as the client's own 1 s timeout — until approved from
// the CLI, and a rejection reaches the model with its reason while the file
// is never written.
func TestTypeScriptClientAndFilesystemServer(t *testing.T) {
	installNPM(t)
	s := startServe(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "testdata/npm/client.mjs", binary, dir)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	type step struct {
		Step     string   `json:"step"`
		Names    []string `json:"names"`
		IsError  bool     `json:"isError"`
		Text     string   `json:"text"`
		Progress int      `json:"progress"`
	}
	next := func(want string) step {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the client ended before step %s", want)
		}
		var st step
		if err := json.Unmarshal(lines.Bytes(), &st); err != nil || st.Step != want {
			t.Fatalf("want step %s, got %s", want, lines.Text())
		}
		return st
	}
	if st := next("list"); !slices.Contains(st.Names, "read_text_file") || !slices.Contains(st.Names, "write_file") {
		t.Fatalf("tools: %v", st.Names)
	}
	if st := next("read"); st.IsError || !strings.Contains(st.Text, "hello from disk") {
		t.Fatalf("read: %+v", st)
	}
	id := s.pending(t, "ts-run", "files.write_file")
	if _, err := os.Stat(filepath.Join(dir, "approved.txt")); !os.IsNotExist(err) {
		t.Fatal("the file was written before the approval")
	}
	next("waiting") // two seconds of progress, twice the client's timeout
	s.cli(t, "approvals", "approve", id)
	if st := next("write"); st.IsError || st.Progress < 10 {
		t.Fatalf("write: %+v", st)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "approved.txt")); err != nil || string(b) != "approved" {
		t.Fatalf("approved.txt: %q %v", b, err)
	}
	id = s.pending(t, "ts-run", "files.write_file")
	s.cli(t, "approvals", "reject", id, "--reason", "not in this folder")
	if st := next("reject"); !st.IsError || !strings.Contains(st.Text, "not in this folder") {
		t.Fatalf("reject: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "rejected.txt")); !os.IsNotExist(err) {
		t.Fatal("a rejected write reached the disk")
	}
}

// The TypeScript SDK client (protocol 2025-11-25) declares elicitation:
// the notes server's question reaches it through the real `countersign mcp`
// as elicitation/create, and the server receives exactly its answer; no
// human-input request is opened.
func TestTypeScriptClientAnswersElicitation(t *testing.T) {
	installNPM(t)
	s := startServe(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	answer := `{"name":"Ada from TypeScript","n":2}`
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/npm/elicit.mjs", binary, self, answer)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token, upstreamEnv+"="+filepath.Join(t.TempDir(), "log"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, out)
	}
	var got struct {
		Asked   mcp.ElicitParams `json:"asked"`
		IsError bool             `json:"isError"`
		Text    string           `json:"text"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Asked.Message != "Which name?" || got.IsError {
		t.Fatalf("client: %s", out)
	}
	var res mcp.ElicitResult
	var want map[string]any
	_ = json.Unmarshal([]byte(answer), &want)
	if err := json.Unmarshal([]byte(got.Text), &res); err != nil || res.Action != "accept" || !reflect.DeepEqual(res.Content, want) {
		t.Fatalf("the server received %s, the client answered %s", got.Text, answer)
	}
	if recs := s.approvals(t, "ts-elicit"); len(recs) != 0 {
		t.Fatalf("%d approvals opened", len(recs))
	}
}
