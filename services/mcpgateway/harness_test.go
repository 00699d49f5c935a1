package mcpgateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/services/mcpgateway"
)

// binary is the countersign binary built once for the package's tests.
var binary string

// upstreamEnv makes the test binary an MCP server on stdio (the notes
// server), appending each destructive call's arguments to the file it names.
const upstreamEnv = "MCPGW_TEST_UPSTREAM_LOG"

func TestMain(m *testing.M) {
	if path := os.Getenv(upstreamEnv); path != "" {
		os.Exit(upstreamMain(path))
	}
	dir, err := os.MkdirTemp("", "countersign-mcp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "countersign")
	build := exec.Command("go", "build", "-o", binary, "../countersign")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building countersign:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// upstreamMain serves the notes server on stdio.
func upstreamMain(path string) int {
	rec := &notes{file: path}
	if err := newUpstream(rec).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		return 1
	}
	return 0
}

// notes records what the upstream was asked to do.
type notes struct {
	mu    sync.Mutex
	calls []string    // "tool args" of every call, in order
	file  string      // when set, destructive calls are appended here too
	kill  func()      // drops the upstream's connection (in-memory upstreams)
	subs  chan string // "subscribe URI" and "unsubscribe URI", when set
	// answers gets each answer ask_name received (JSON), when set.
	answers chan string
	// entered gets the arguments of each archive_note call when it
	// starts, and the call returns only once release is closed (when set).
	entered chan string
	release chan struct{}
}

// subscription records a resources/subscribe or unsubscribe.
func (n *notes) subscription(what, uri string) {
	if n.subs != nil {
		n.subs <- what + " " + uri
	}
}

// killable is a connection a test can drop.
type killable struct {
	mcp.Transport
	conn chan mcp.Connection
}

func (k *killable) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := k.Transport.Connect(ctx)
	if err == nil {
		k.conn <- c
	}
	return c, err
}

func (n *notes) add(tool string, args json.RawMessage) {
	n.mu.Lock()
	defer n.mu.Unlock()
	canon, _ := contracts.Canonicalize(args)
	line := tool + " " + string(canon)
	n.calls = append(n.calls, line)
	if n.file != "" {
		f, err := os.OpenFile(n.file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Sync()
			f.Close()
		}
	}
}

func (n *notes) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

func ptr[T any](v T) *T { return &v }

var objectSchema = map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}}

// newUpstream is an MCP server built with the Go SDK: read_note is
// read-only, delete_note destructive, crash (read-only) drops the
// connection in the middle of the call, ask_name elicits.
func newUpstream(rec *notes) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1.0.0"}, &mcp.ServerOptions{
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			rec.subscription("subscribe", req.Params.URI)
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			rec.subscription("unsubscribe", req.Params.URI)
			return nil
		},
	})
	s.AddTool(&mcp.Tool{Name: "read_note", Description: "Read a note.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			rec.add("read_note", req.Params.Arguments)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "note " + string(req.Params.Arguments)}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "delete_note", Description: "Delete a note.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			rec.add("delete_note", req.Params.Arguments)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted " + string(req.Params.Arguments)}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "archive_note", Description: "Archive a note (slowly).", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			rec.add("archive_note", req.Params.Arguments)
			if rec.entered != nil {
				rec.entered <- string(req.Params.Arguments)
			}
			if rec.release != nil {
				select {
				case <-rec.release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "archived " + string(req.Params.Arguments)}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "crash", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			rec.add("crash", req.Params.Arguments)
			rec.mu.Lock()
			kill := rec.kill
			rec.mu.Unlock()
			if kill == nil {
				os.Exit(3) // a process upstream dies
			}
			kill() // the connection drops while the call runs
			<-ctx.Done()
			return nil, ctx.Err()
		})
	s.AddTool(&mcp.Tool{Name: "ask_name", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// Asked as a multi round-trip input request: the SDK sends it as
			// elicitation/create to clients of earlier protocol versions.
			if res, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok {
				b, _ := json.Marshal(res)
				if rec.answers != nil {
					rec.answers <- string(b)
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "Which name?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"}}}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: "notes://index", Name: "index", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "notes://index", Text: "a, b, c"}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "summarize"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Summarize the notes."}}}}, nil
	})
	return s
}

// serve is a running `countersign serve` (the real binary).
type serve struct {
	cmd   *exec.Cmd
	url   string
	token string
	data  string
	exit  chan error
}

// startServe runs `countersign serve` on a fresh data directory with the
// shipped policy (deploy/policy.yaml).
func startServe(t testing.TB) *serve {
	t.Helper()
	return startServeWith(t, "../../deploy/policy.yaml")
}

// startServeWith is startServe with another policy file.
func startServeWith(t testing.TB, policy string) *serve {
	t.Helper()
	return startServeArgs(t, "", "--policy", policy)
}

// startServeArgs runs `countersign serve` on a fresh data directory with
// more arguments; token is the API token of the tests' requests (empty:
// the development token serve makes).
func startServeArgs(t testing.TB, token string, extra ...string) *serve {
	t.Helper()
	data := t.TempDir()
	args := append([]string{"serve", "--data", data, "--addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--log-level", "warn"}, extra...)
	cmd := exec.Command(binary, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serve{cmd: cmd, data: data, exit: make(chan error, 1)}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	go func() { s.exit <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-s.exit
	})
	deadline := time.After(60 * time.Second)
	for s.url == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited before it was ready: %s", stderr.String())
			}
			if strings.HasPrefix(strings.TrimSpace(line), "API:") {
				s.url = strings.TrimSuffix(strings.Fields(strings.TrimSpace(line))[1], "/v1")
			}
		case <-deadline:
			t.Fatal("serve did not become ready")
		}
	}
	if token != "" {
		s.token = token
		return s
	}
	tok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(tok))
	return s
}

// cli runs the countersign CLI against s.
func (s *serve) cli(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("countersign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (s *serve) client(t testing.TB) *client.Client {
	return s.clientAs(t, s.token)
}

// clientAs is a client of s with another token.
func (s *serve) clientAs(t testing.TB, token string) *client.Client {
	c, err := client.New(client.Config{URL: s.url, Token: token, RetryFor: 5 * time.Second, MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// approvals lists the approvals of a run (all statuses).
func (s *serve) approvals(t testing.TB, runID string) []contracts.Record {
	t.Helper()
	req, _ := http.NewRequest("GET", s.url+"/v1/approvals?status=pending,approved,rejected,responded,answered,expired,cancelled&run_id="+url.QueryEscape(runID)+"&limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Items []struct {
			Record contracts.Record `json:"record"`
		} `json:"items"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &out) != nil {
		t.Fatalf("list approvals: %d %s", resp.StatusCode, body)
	}
	recs := make([]contracts.Record, len(out.Items))
	for i, it := range out.Items {
		recs[i] = it.Record
	}
	return recs
}

// pending waits until the run has a pending approval for tool, other than
// the ones excepted, and returns its event id.
func (s *serve) pending(t testing.TB, runID, tool string, except ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range s.approvals(t, runID) {
			if r.Status == contracts.StatusPending && r.Request.ToolCall != nil && r.Request.ToolCall.Name == tool &&
				!slices.Contains(except, r.Request.EventID) {
				return r.Request.EventID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pending approval of %s in run %s", tool, runID)
	return ""
}

// rig is a gateway in this process between a Go SDK client and the notes
// upstream, reviewing through a real countersign serve.
type rig struct {
	serve    *serve
	notes    *notes
	gateway  *mcpgateway.Gateway
	upstream *mcp.Server // the notes server every upstream session is of
	session  *mcp.ClientSession
	runID    string
	progress chan *mcp.ProgressNotificationParams
}

func newRig(t *testing.T, edit func(*mcpgateway.Config)) *rig {
	t.Helper()
	s := startServe(t)
	return newRigOn(t, s, edit)
}

func newRigOn(t testing.TB, s *serve, edit func(*mcpgateway.Config)) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{serve: s, notes: &notes{subs: make(chan string, 100), answers: make(chan string, 100)}, runID: "test:" + t.Name(), progress: make(chan *mcp.ProgressNotificationParams, 100)}
	up := newUpstream(r.notes)
	r.upstream = up
	cfg := mcpgateway.Config{
		Name: "notes", Countersign: s.client(t), RunID: r.runID, RequestedBy: "carol",
		MaxWait: 30 * time.Second, ProgressEvery: 100 * time.Millisecond,
		Dial: func(ctx context.Context, c *mcp.Client) (*mcp.ClientSession, error) {
			t1, t2 := mcp.NewInMemoryTransports()
			k := &killable{Transport: t1, conn: make(chan mcp.Connection, 1)}
			if _, err := up.Connect(ctx, k, nil); err != nil {
				return nil, err
			}
			conn := <-k.conn
			r.notes.mu.Lock()
			r.notes.kill = func() { conn.Close() }
			r.notes.mu.Unlock()
			return c.Connect(ctx, t2, nil)
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	g, err := mcpgateway.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	r.gateway = g
	r.session = r.connect(t, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			select {
			case r.progress <- req.Params:
			default:
			}
		},
	}, nil)
	return r
}

// connect connects another Go SDK client to the gateway.
func (r *rig) connect(t testing.TB, opts *mcp.ClientOptions, sopts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := r.gateway.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client"}, opts).Connect(context.Background(), ct, sopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls tool with args (JSON) and a progress token.
func (r *rig) call(t testing.TB, tool, args string) *mcp.CallToolResult {
	t.Helper()
	return r.callOn(t, r.session, tool, args)
}

// callOn calls tool on another client session of the gateway.
func (r *rig) callOn(t testing.TB, cs *mcp.ClientSession, tool, args string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)}
	p.SetProgressToken("tok-" + tool)
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("call %s %s: %v", tool, args, err)
	}
	return res
}

// callAsync calls tool in the background.
func (r *rig) callAsync(t testing.TB, tool, args string) <-chan *mcp.CallToolResult {
	return r.callAsyncOn(t, r.session, tool, args)
}

// callAsyncOn calls tool in the background on another client session.
func (r *rig) callAsyncOn(t testing.TB, cs *mcp.ClientSession, tool, args string) <-chan *mcp.CallToolResult {
	out := make(chan *mcp.CallToolResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		p := &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)}
		p.SetProgressToken("tok-" + tool)
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			t.Errorf("call %s %s: %v", tool, args, err)
		}
		out <- res
	}()
	return out
}

func text(res *mcp.CallToolResult) string {
	if res == nil {
		return "<nil>"
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
			b.WriteString("\n")
		}
	}
	return b.String()
}

func receive[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(60 * time.Second):
		t.Fatal("timed out")
		panic("unreachable")
	}
}
