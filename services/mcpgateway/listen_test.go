package mcpgateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/services/mcpgateway"
)

// listenProc is `countersign mcp --listen` (the real binary) in front of
// Streamable HTTP upstreams.
type listenProc struct {
	base string      // http://ADDR
	logs chan string // the gateway's log lines
}

// callerToken is the bearer token of the caller "dana" of listenProc.
const callerToken = "dana-token"

// startListenProc starts `countersign mcp --listen` with the upstreams
// (NAME=URL) and waits until it serves.
func startListenProc(t *testing.T, s *serve, upstreams ...string) *listenProc {
	t.Helper()
	callers := filepath.Join(t.TempDir(), "callers.yaml")
	if err := os.WriteFile(callers, []byte("callers:\n  - id: dana\n    token_sha256: "+mcpgateway.HashToken(callerToken)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"mcp", "--listen", "127.0.0.1:0", "--callers", callers, "--progress-every", "100ms", "--log-level", "info"}
	for _, u := range upstreams {
		args = append(args, "--upstream", u)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	})
	p := &listenProc{logs: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			offer(p.logs, sc.Text())
		}
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 2 && f[0] == "MCP" && f[1] == "gateway:" {
				ready <- strings.TrimSuffix(f[2], "/mcp/NAME")
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case p.base = <-ready:
	case <-exited:
		t.Fatal("countersign mcp --listen exited before it served")
	case <-time.After(time.Minute):
		t.Fatal("countersign mcp --listen did not start")
	}
	return p
}

// connect connects a Go SDK client to the upstream name as dana.
func (p *listenProc) connect(t *testing.T, name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client"}, opts).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: p.base + "/mcp/" + name, HTTPClient: &http.Client{Transport: bearer{callerToken}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// metrics reads the gateway's /metrics.
func (p *listenProc) metrics(t *testing.T) string {
	t.Helper()
	req, _ := http.NewRequest("GET", p.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+callerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// awaitLog waits for a log line of the gateway that contains every one of
// parts.
func (p *listenProc) awaitLog(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case line := <-p.logs:
			ok := true
			for _, part := range parts {
				ok = ok && strings.Contains(line, part)
			}
			if ok {
				return line
			}
		case <-deadline:
			t.Fatalf("no log line with %q", parts)
		}
	}
}

// notesOverHTTP serves the notes server over Streamable HTTP on ln.
func notesOverHTTP(t *testing.T, ln net.Listener, rec *notes) *httptest.Server {
	srv := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newUpstream(rec) }, nil))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections() // a client's open event stream too
		srv.Close()
	})
	return srv
}

// `countersign mcp --listen` with one upstream that cannot be reached
// serves the others; the bad one's clients get an error naming it, the
// logs and /metrics say it is down, and once it answers the gateway serves
// it too.
func TestUnreachableUpstreamLeavesTheOthersServed(t *testing.T) {
	s := startServe(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	good := notesOverHTTP(t, ln, &notes{})
	// An address nothing listens on, for now.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	badAddr := hole.Addr().String()
	hole.Close()

	p := startListenProc(t, s, "notes="+good.URL, "bad=http://"+badAddr+"/mcp")
	p.awaitLog(t, "WARN", "cannot be reached", "upstream=bad")
	ctx := t.Context()
	cs := p.connect(t, "notes", nil)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_note", Arguments: map[string]any{"id": "a"}})
	if err != nil || res.IsError || !strings.Contains(text(res), `note {"id":"a"}`) {
		t.Fatalf("the reachable upstream: %v %s", err, text(res))
	}
	bad := p.connect(t, "bad", nil)
	if _, err := bad.ListTools(ctx, nil); err == nil || !strings.Contains(err.Error(), `cannot reach the upstream MCP server "bad"`) {
		t.Fatalf("tools/list of the unreachable upstream: %v", err)
	}
	if _, err := bad.CallTool(ctx, &mcp.CallToolParams{Name: "read_note", Arguments: map[string]any{"id": "b"}}); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("tools/call of the unreachable upstream: %v", err)
	}
	m := p.metrics(t)
	if !strings.Contains(m, `countersign_mcp_upstream_up{upstream="notes"} 1`) || !strings.Contains(m, `countersign_mcp_upstream_up{upstream="bad"} 0`) ||
		strings.Contains(m, `countersign_mcp_upstream_connect_failures_total{upstream="bad"} 0`) {
		t.Fatalf("metrics:\n%s", m)
	}

	// The upstream comes up: the gateway reaches it and serves it.
	ln, err = net.Listen("tcp", badAddr)
	if err != nil {
		t.Fatal(err)
	}
	later := &notes{}
	notesOverHTTP(t, ln, later)
	p.awaitLog(t, "reachable", "upstream=bad")
	if m := p.metrics(t); !strings.Contains(m, `countersign_mcp_upstream_up{upstream="bad"} 1`) {
		t.Fatalf("metrics after the upstream came up:\n%s", m)
	}
	for _, c := range []*mcp.ClientSession{bad, p.connect(t, "bad", nil)} {
		res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "read_note", Arguments: map[string]any{"id": "c"}})
		if err != nil || res.IsError || !strings.Contains(text(res), `note {"id":"c"}`) {
			t.Fatalf("the upstream once it answers: %v %s", err, text(res))
		}
	}
	if calls := later.all(); len(calls) != 2 {
		t.Fatalf("the upstream ran %q", calls)
	}
}
