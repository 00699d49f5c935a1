package mcpgateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/mcpgateway"
)

// apiToken is a token of countersign.yaml.
type apiToken struct {
	subject, roles string
	token          string
}

func newAPIToken(t testing.TB, subject, roles string) apiToken {
	tok, _, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return apiToken{subject: subject, roles: roles, token: tok}
}

// startServeTokens is startServe with the API tokens given in place of
// the development token; the tests' own requests use the first.
func startServeTokens(t testing.TB, tokens ...apiToken) *serve {
	t.Helper()
	var b strings.Builder
	b.WriteString("tokens:\n")
	for _, tk := range tokens {
		fmt.Fprintf(&b, "  - name: %s\n    subject: %s\n    sha256: %s\n    roles: [%s]\n", tk.subject, tk.subject, api.HashToken(tk.token), tk.roles)
	}
	cfg := filepath.Join(t.TempDir(), "countersign.yaml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServeArgs(t, tokens[0].token, "--config", cfg, "--policy", "../../deploy/policy.yaml")
}

// watchCalls reports the error of every tools/call the gateway has
// finished serving (nil for a result): the signal that its handler, and
// whatever it does when the client cancels, is done.
func watchCalls(g *mcpgateway.Gateway) <-chan error {
	out := make(chan error, 100)
	g.Server().AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if method == "tools/call" {
				out <- err
			}
			return res, err
		}
	})
	return out
}

// startCall calls delete_note with args on cs in the background, with a
// progress token; the call ends when ctx does.
func startCall(ctx context.Context, cs *mcp.ClientSession, args string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "delete_note", Arguments: json.RawMessage(args)}
		p.SetProgressToken("tok-cancel")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	return errc
}

// decided waits (long polls, no sleeping) until the approval is decided.
func decided(t *testing.T, c *client.Client, id string) *contracts.Record {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		rec, _, err := c.Approval(t.Context(), id, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Terminal() {
			return rec
		}
	}
	t.Fatalf("approval %s still pending", id)
	return nil
}

func status(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	rec, _, err := c.Approval(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

func deletes(n *notes) []string {
	return slices.DeleteFunc(n.all(), func(c string) bool { return !strings.HasPrefix(c, "delete_note") })
}

// A client that cancels a gated call while it waits (MCP
// notifications/cancelled) cancels the approval the call opened, as the
// agent that submitted it (the gateway's agent token, nothing more): an
// approver's later vote is refused as closed, a restarted gateway that
// finds the cancelled approval does not run the call, and the same call
// again is a new request that runs only once approved. Of two identical
// calls waiting on one approval, the one cancelled leaves it to the
// other. Over Streamable HTTP the same holds.
func TestClientCancelCancelsItsApproval(t *testing.T) {
	alice := newAPIToken(t, "alice", "approver, admin")
	agent := newAPIToken(t, "mcp-gateway", "agent")
	s := startServeTokens(t, alice, agent)
	asAgent := func(c *mcpgateway.Config) {
		c.Countersign = s.clientAs(t, agent.token)
		c.Cancel = mcpgateway.CancelOverHTTP(s.url, agent.token, nil)
	}
	r := newRigOn(t, s, asAgent)
	served := watchCalls(r.gateway)
	approver := s.client(t)
	ctx := t.Context()
	approve := func(id string) (*contracts.Record, error) {
		return approver.Decide(ctx, id, client.Vote{Decision: "approve", Comment: "ok"})
	}

	// Cancelled while the gateway waits for the decision.
	cctx, cancel := context.WithCancel(ctx)
	errc := startCall(cctx, r.session, `{"id":"c"}`)
	id := s.pending(t, r.runID, "notes.delete_note")
	if p := receive(t, r.progress); !strings.Contains(p.Message, id) {
		t.Fatalf("progress: %+v", p)
	}
	cancel()
	if err := receive(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	receive(t, served)
	rec := decided(t, approver, id)
	if rec.Status != contracts.StatusCancelled || rec.Outcome == nil || !slices.Equal(rec.Outcome.DecidedBy, []string{agent.subject}) {
		t.Fatalf("approval after the client cancelled: %s, outcome %+v", rec.Status, rec.Outcome)
	}
	if _, err := approve(id); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("approving a cancelled approval: %v, want closed", err)
	}

	// A restarted gateway (nothing in memory) re-attaches to the cancelled
	// approval and does not run the call.
	restarted := newRigOn(t, s, asAgent)
	got := restarted.call(t, "delete_note", `{"id":"c"}`)
	if !got.IsError || !strings.Contains(text(got), "cancelled") {
		t.Fatalf("re-attached to a cancelled approval: %s", text(got))
	}
	if m, _ := got.Meta["countersign"].(map[string]any); m["event_id"] != id || m["verdict"] != client.Cancelled {
		t.Fatalf("meta: %v", got.Meta)
	}

	// The same call again is a new request; it runs once it is approved.
	done := r.callAsync(t, "delete_note", `{"id":"c"}`)
	id2 := s.pending(t, r.runID, "notes.delete_note", id)
	if calls := deletes(r.notes); len(calls) != 0 {
		t.Fatalf("ran without a new approval: %q", calls)
	}
	if _, err := approve(id2); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, done); got.IsError || !strings.Contains(text(got), `deleted {"id":"c"}`) {
		t.Fatalf("after the new approval: %s", text(got))
	}
	receive(t, served)
	if calls := append(deletes(r.notes), deletes(restarted.notes)...); !slices.Equal(calls, []string{`delete_note {"id":"c"}`}) {
		t.Fatalf("upstream calls %q", calls)
	}

	// Two identical calls wait on one approval; one client cancels.
	otherProgress := make(chan *mcp.ProgressNotificationParams, 100)
	other := r.connect(t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		offer(otherProgress, req.Params)
	}}, nil)
	cctx, cancel = context.WithCancel(ctx)
	errc = startCall(cctx, r.session, `{"id":"d"}`)
	id3 := s.pending(t, r.runID, "notes.delete_note", id, id2)
	second := startCall(ctx, other, `{"id":"d"}`)
	if p := receive(t, otherProgress); !strings.Contains(p.Message, id3) {
		t.Fatalf("the second call waits on %s, want %s", p.Message, id3)
	}
	cancel()
	if err := receive(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	receive(t, served)
	if st := status(t, approver, id3); st != contracts.StatusPending {
		t.Fatalf("an approval another call waits on became %s", st)
	}
	if _, err := approve(id3); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, second); err != nil {
		t.Fatal(err)
	}
	if calls := deletes(r.notes); !slices.Equal(calls, []string{`delete_note {"id":"c"}`, `delete_note {"id":"d"}`}) {
		t.Fatalf("upstream calls %q", calls)
	}

	// Over Streamable HTTP (a session, protocol 2025-11-25).
	srv := httptest.NewServer(mcpgateway.Handler([]*mcpgateway.Gateway{r.gateway}, mcpgateway.Callers{mcpgateway.HashToken("dana-token"): "dana"}))
	t.Cleanup(srv.Close)
	hc, err := mcp.NewClient(&mcp.Implementation{Name: "http-client"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp/notes", HTTPClient: &http.Client{Transport: bearer{"dana-token"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	cctx, cancel = context.WithCancel(ctx)
	errc = startCall(cctx, hc, `{"id":"e"}`)
	id4 := s.pending(t, "mcp:dana:notes", "notes.delete_note")
	cancel()
	if err := receive(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if rec := decided(t, approver, id4); rec.Status != contracts.StatusCancelled {
		t.Fatalf("approval after the HTTP client cancelled: %s", rec.Status)
	}
	if calls := deletes(r.notes); len(calls) != 2 {
		t.Fatalf("upstream calls %q", calls)
	}
}

// A client that goes away in the middle of a gated call (its connection
// closes; no notifications/cancelled) leaves the approval pending: the wait
// merely ended. The same call again re-attaches to it and runs once
// approved.
func TestDisconnectLeavesApprovalPending(t *testing.T) {
	s := startServe(t)
	r := newRigOn(t, s, func(c *mcpgateway.Config) { c.Cancel = mcpgateway.CancelOverHTTP(s.url, s.token, nil) })
	served := watchCalls(r.gateway)
	progress := make(chan *mcp.ProgressNotificationParams, 100)
	ct, st := mcp.NewInMemoryTransports()
	if _, err := r.gateway.Server().Connect(t.Context(), st, nil); err != nil {
		t.Fatal(err)
	}
	k := &killable{Transport: ct, conn: make(chan mcp.Connection, 1)}
	leaving, err := mcp.NewClient(&mcp.Implementation{Name: "leaving"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { offer(progress, req.Params) },
	}).Connect(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := <-k.conn
	errc := startCall(t.Context(), leaving, `{"id":"f"}`)
	id := s.pending(t, r.runID, "notes.delete_note")
	receive(t, progress) // the gateway waits for the decision
	conn.Close()         // the connection drops (a client process that exits)
	if err := receive(t, errc); err == nil {
		t.Fatal("a call of a closed session returned a result")
	}
	if err := receive(t, served); err == nil {
		t.Fatal("the gateway answered a call whose client went away")
	}
	if st := status(t, s.client(t), id); st != contracts.StatusPending {
		t.Fatalf("the approval of a call whose client went away became %s", st)
	}
	done := r.callAsync(t, "delete_note", `{"id":"f"}`)
	r.serve.cli(t, "approvals", "approve", id)
	if got := receive(t, done); got.IsError || !strings.Contains(text(got), `deleted {"id":"f"}`) {
		t.Fatalf("re-attached call: %s", text(got))
	}
	if recs := s.approvals(t, r.runID); len(recs) != 1 {
		t.Fatalf("%d approvals, want the one re-attached to", len(recs))
	}
}

// A cancel reaches the approval over the real transports: `countersign
// mcp` on stdio and `countersign mcp --listen` (Streamable HTTP), each
// with the Go SDK client and with the TypeScript SDK client, every call
// cancelled while the gateway waits for the decision (after its first
// progress notification). Each approval ends cancelled and the upstream
// runs nothing.
func TestCancelOverRealTransports(t *testing.T) {
	installNPM(t)
	s := startServe(t)
	approver := s.client(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "upstream.log")
	// cancelGo calls delete_note with args on cs and cancels the call at
	// its first progress notification.
	cancelGo := func(cs *mcp.ClientSession, progress <-chan *mcp.ProgressNotificationParams, args string) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		errc := startCall(ctx, cs, args)
		receive(t, progress)
		cancel()
		if err := receive(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	}
	// cancelTS starts the TypeScript client, which cancels its call at the
	// first progress notification; it exits once it printed that and done
	// is called.
	cancelTS := func(args ...string) (done func()) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "node", append([]string{"testdata/npm/cancel.mjs"}, args...)...)
		cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token, upstreamEnv+"="+log)
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
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.Contains(line, `"step":"aborted"`) || !strings.Contains(line, "stopped") {
			t.Fatalf("the TypeScript client: %v %s", err, line)
		}
		return func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the TypeScript client: %v", err)
			}
		}
	}
	cancelled := func(runID string, except ...string) string {
		t.Helper()
		var id string
		for _, r := range s.approvals(t, runID) {
			if r.Request.ToolCall != nil && !slices.Contains(except, r.Request.EventID) {
				id = r.Request.EventID
			}
		}
		if id == "" {
			t.Fatalf("no new approval in run %s", runID)
		}
		if rec := decided(t, approver, id); rec.Status != contracts.StatusCancelled {
			t.Fatalf("the approval of a cancelled call in run %s is %s", runID, rec.Status)
		}
		return id
	}

	// stdio, Go SDK client.
	progress := make(chan *mcp.ProgressNotificationParams, 100)
	p := startGatewayProcWith(t, s, log, "60s", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		offer(progress, req.Params)
	}})
	cancelGo(p.session, progress, `{"id":"stdio-go"}`)
	cancelled("restart-run")

	// stdio, TypeScript SDK client.
	exit := cancelTS("stdio", binary, self, "ts-cancel", `{"id":"stdio-ts"}`)
	cancelled("ts-cancel")
	exit()

	// Streamable HTTP, Go SDK client.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &notes{}
	srv := notesOverHTTP(t, ln, up)
	h := startListenProc(t, s, "notes="+srv.URL)
	progress = make(chan *mcp.ProgressNotificationParams, 100)
	cs := h.connect(t, "notes", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		offer(progress, req.Params)
	}})
	cancelGo(cs, progress, `{"id":"http-go"}`)
	viaHTTP := cancelled("mcp:dana:notes")

	// Streamable HTTP, TypeScript SDK client.
	exit = cancelTS("http", h.base+"/mcp/notes", callerToken, `{"id":"http-ts"}`)
	cancelled("mcp:dana:notes", viaHTTP)
	exit()

	if got := append(upstreamLog(t, log), up.all()...); len(got) != 0 {
		t.Fatalf("the upstream ran %q", got)
	}
}
