package mcpgateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// gatewayProc is `countersign mcp` (the real binary) wrapping the notes
// upstream (this test binary) on stdio, with a Go SDK client on its stdio.
type gatewayProc struct {
	cmd     *exec.Cmd
	session *mcp.ClientSession
}

func startGatewayProc(t *testing.T, s *serve, log string, maxWait string) *gatewayProc {
	return startGatewayProcWith(t, s, log, maxWait, nil)
}

// startGatewayProcWith is startGatewayProc with a client of the options given.
func startGatewayProcWith(t *testing.T, s *serve, log string, maxWait string, opts *mcp.ClientOptions) *gatewayProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "mcp", "--name", "notes", "--run-id", "restart-run", "--max-wait", maxWait,
		"--progress-every", "100ms", "--log-level", "warn", "--", self)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token, upstreamEnv+"="+log)
	cmd.Stderr = os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "restart-client"}, opts)
	session, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{cmd: cmd, session: session}
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL to the gateway.
func (p *gatewayProc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	_ = p.session.Close()
}

func upstreamLog(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
}

// The gateway is killed with SIGKILL while a destructive call is held;
// after a restart the same call re-attaches to the same approval and, once
// approved, the upstream runs it exactly once.
func TestKilledGatewayReattachesAndRunsOnce(t *testing.T) {
	s := startServe(t)
	log := filepath.Join(t.TempDir(), "upstream.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	first := startGatewayProc(t, s, log, "60s")
	errs := make(chan error, 1)
	go func() {
		_, err := first.session.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"id": "q3-report"}})
		errs <- err
	}()
	id := s.pending(t, "restart-run", "notes.delete_note")
	first.kill()
	if err := receive(t, errs); err == nil {
		t.Fatal("the call returned a result from a killed gateway")
	}

	second := startGatewayProc(t, s, log, "300ms")
	res, err := second.session.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"id": "q3-report"}})
	if err != nil || !strings.Contains(text(res), id) {
		t.Fatalf("after the restart: %v %s (want approval %s)", err, text(res), id)
	}
	if n := len(s.approvals(t, "restart-run")); n != 1 {
		t.Fatalf("%d approvals, want the one re-attached", n)
	}
	s.cli(t, "approvals", "approve", id)
	res, err = second.session.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"id": "q3-report"}})
	if err != nil || res.IsError || !strings.Contains(text(res), "deleted") {
		t.Fatalf("approved call: %v %s", err, text(res))
	}
	if got := upstreamLog(t, log); len(got) != 2 || got[0] != "delete_note" || got[1] != `{"id":"q3-report"}` {
		t.Fatalf("upstream ran %q, want the approved call once", got)
	}
	// Killed again after the run: a third gateway never runs it a second
	// time; the same call is a new request.
	second.kill()
	third := startGatewayProc(t, s, log, "300ms")
	res, err = third.session.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"id": "q3-report"}})
	if err != nil || !strings.Contains(text(res), "awaiting human approval") || strings.Contains(text(res), id) {
		t.Fatalf("third gateway: %v %s", err, text(res))
	}
	if got := upstreamLog(t, log); len(got) != 2 {
		t.Fatalf("upstream ran %q", got)
	}
}

// The real `countersign mcp` on stdio, with a Go SDK client on protocol
// 2026-07-28 that supports elicitation: the notes server's question reaches
// the client as an input request, and the server receives exactly the
// client's answer.
func TestGatewayProcessPassesElicitationToTheClient(t *testing.T) {
	s := startServe(t)
	answer := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada over stdio"}}
	p := startGatewayProcWith(t, s, filepath.Join(t.TempDir(), "upstream.log"), "60s", &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return answer, nil },
	})
	if v := p.session.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := p.session.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var got mcp.ElicitResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(text(res))), &got); err != nil || got.Action != "accept" || got.Content["name"] != "Ada over stdio" {
		t.Fatalf("the server received %s", text(res))
	}
}

// The real `countersign mcp` on stdio answers lines that are not JSON,
// not JSON-RPC, over the size limit, or for a method it does not serve,
// with JSON-RPC errors, and goes on serving the same session.
func TestGatewayProcessAnswersBadLines(t *testing.T) {
	s := startServe(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "mcp", "--name", "notes", "--run-id", "raw-run", "--log-level", "warn", "--", self)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token, upstreamEnv+"="+filepath.Join(t.TempDir(), "log"))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan []byte, 10)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- line
		}
	}()
	type answer struct {
		ID     any             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	ask := func(line string) answer {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"notifications/`) {
			return answer{}
		}
		var a answer
		select {
		case got, ok := <-lines:
			if !ok {
				t.Fatalf("%.60s: the gateway ended the session", line)
			}
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatalf("%.60s: %v %s", line, err, got)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%.60s: no answer", line)
		}
		return a
	}
	if a := ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); a.Error != nil {
		t.Fatalf("initialize: %s", a.Error.Message)
	}
	ask(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	ask(`{"jsonrpc":"2.0","method":"notifications/explode"}`) // dropped: no answer
	for _, c := range []struct {
		line string
		code int
		id   any
	}{
		{`{"jsonrpc":"2.0","id":2,"method":`, -32700, nil},
		{`{"jsonrpc":"2.0","id":3,"method":5}`, -32600, nil},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/explode"}`, -32601, 4.0},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_note","arguments":{"id":"` + strings.Repeat("x", 5<<20) + `"}}}`, -32600, nil},
	} {
		if a := ask(c.line); a.Error == nil || a.Error.Code != c.code || a.ID != c.id {
			t.Fatalf("%.60s: %+v, want error %d", c.line, a, c.code)
		}
	}
	a := ask(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"read_note","arguments":{"id":"still here"}}}`)
	if a.Error != nil || a.ID != 6.0 || !strings.Contains(string(a.Result), `note {\"id\":\"still here\"}`) {
		t.Fatalf("the session after the bad lines: %+v %s", a, a.Result)
	}
}
