package mcpgateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/services/mcpgateway"
)

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// rpcAnswer is a JSON-RPC error response as a raw HTTP client reads it.
type rpcAnswer struct {
	ID    any `json:"id"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// httpRig serves a rig's gateway over Streamable HTTP to the caller dana.
type httpRig struct {
	*rig
	endpoint string
	session  string // Mcp-Session-Id of raw requests, when set
}

func newHTTPRig(t *testing.T) *httpRig {
	r := newRig(t, nil)
	srv := httptest.NewServer(mcpgateway.Handler([]*mcpgateway.Gateway{r.gateway}, mcpgateway.Callers{mcpgateway.HashToken("dana-token"): "dana"}))
	t.Cleanup(srv.Close)
	return &httpRig{rig: r, endpoint: srv.URL + "/mcp/notes"}
}

// post sends a raw JSON-RPC body.
func (h *httpRig) post(t *testing.T, token, body string) (int, string) {
	req, _ := http.NewRequest("POST", h.endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if h.session != "" {
		req.Header.Set("Mcp-Session-Id", h.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// answer posts body as dana and decodes the JSON-RPC error it gets.
func (h *httpRig) answer(t *testing.T, body string, status int) rpcAnswer {
	t.Helper()
	code, got := h.post(t, "dana-token", body)
	var a rpcAnswer
	if code != status || json.Unmarshal([]byte(got), &a) != nil || a.Error == nil {
		t.Fatalf("%.60s: HTTP %d %s, want %d and a JSON-RPC error", body, code, got, status)
	}
	return a
}

// connect connects a Go SDK client as dana.
func (h *httpRig) connect(t *testing.T) *mcp.ClientSession {
	return h.connectWith(t, nil)
}

func (h *httpRig) connectWith(t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
	c := mcp.NewClient(&mcp.Implementation{Name: "http-client"}, opts)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: h.endpoint, HTTPClient: &http.Client{Transport: bearer{"dana-token"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Over Streamable HTTP the caller's bearer token names requested_by; a
// request without a known token is refused.
func TestHTTPIdentity(t *testing.T) {
	h := newHTTPRig(t)
	if code, _ := h.post(t, "wrong", `{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d", code)
	}
	cs := h.connect(t)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"id": "h"}})
		if err != nil {
			t.Errorf("call: %v", err)
		}
		done <- res
	}()
	id := h.serve.pending(t, "mcp:dana:notes", "notes.delete_note")
	rec := h.serve.approvals(t, "mcp:dana:notes")[0]
	if rec.Request.Run.RequestedBy != "dana" {
		t.Fatalf("requested_by %q, want the caller", rec.Request.Run.RequestedBy)
	}
	h.serve.cli(t, "approvals", "approve", id)
	if res := receive(t, done); res == nil || res.IsError || len(h.notes.all()) != 1 {
		t.Fatalf("approved HTTP call: %s, upstream %q", text(res), h.notes.all())
	}
}

// Malformed JSON-RPC, unknown methods and oversized bodies get JSON-RPC
// errors over Streamable HTTP, none of them reaches the upstream, and the
// gateway keeps serving.
func TestHTTPBadRequestsGetJSONRPCErrors(t *testing.T) {
	h := newHTTPRig(t)
	if a := h.answer(t, `{"jsonrpc":"2.0","id":1,"method":`, http.StatusBadRequest); a.Error.Code != -32700 || a.ID != nil {
		t.Fatalf("malformed JSON: %+v", a)
	}
	if a := h.answer(t, `{"jsonrpc":"2.0","id":2,"method":5}`, http.StatusBadRequest); a.Error.Code != -32600 {
		t.Fatalf("not a JSON-RPC request: %+v", a)
	}
	huge := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_note","arguments":{"id":"` + strings.Repeat("x", 5<<20) + `"}}}`
	if a := h.answer(t, huge, http.StatusRequestEntityTooLarge); a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "over this gateway's limit") {
		t.Fatalf("oversized body: %+v", a)
	}
	cs := h.connect(t)
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %s over Streamable HTTP", v)
	}
	h.session = cs.ID()
	// An unknown method is refused, naming it; a batch with one is not run
	// at all; an unknown notification is dropped.
	if a := h.answer(t, `{"jsonrpc":"2.0","id":7,"method":"tools/explode"}`, http.StatusOK); a.Error.Code != -32601 || a.ID != 7.0 ||
		!strings.Contains(a.Error.Message, `"tools/explode" not found`) {
		t.Fatalf("unknown method: %+v", a)
	}
	code, body := h.post(t, "dana-token", `[{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read_note","arguments":{"id":"batch"}}},`+
		`{"jsonrpc":"2.0","id":9,"method":"tools/explode"}]`)
	var batch []rpcAnswer
	if code != http.StatusOK || json.Unmarshal([]byte(body), &batch) != nil || len(batch) != 2 ||
		batch[0].Error == nil || batch[0].Error.Code != -32600 || batch[1].Error == nil || batch[1].Error.Code != -32601 {
		t.Fatalf("batch with an unknown method: %d %s", code, body)
	}
	if code, body := h.post(t, "dana-token", `{"jsonrpc":"2.0","method":"notifications/explode"}`); code != http.StatusAccepted {
		t.Fatalf("unknown notification: %d %s", code, body)
	}
	if calls := h.notes.all(); len(calls) != 0 {
		t.Fatalf("refused requests reached the upstream: %q", calls)
	}
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_note", Arguments: map[string]any{"id": "after"}}); err != nil || res.IsError {
		t.Fatalf("the session after the refusals: %v %s", err, text(res))
	}
}

// Over Streamable HTTP an upstream's question reaches the client that
// supports elicitation, and the upstream receives exactly its answer.
func TestHTTPElicitationReachesTheClient(t *testing.T) {
	h := newHTTPRig(t)
	answer := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Dana"}}
	cs := h.connectWith(t, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return answer, nil },
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var got mcp.ElicitResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(text(res))), &got); err != nil || got.Action != "accept" || got.Content["name"] != "Dana" {
		t.Fatalf("the upstream received %s", text(res))
	}
}
