package mcpgateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/services/mcpgateway"
)

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// Over Streamable HTTP the caller's bearer token names requested_by; a
// request without a known token is refused; malformed JSON-RPC and unknown
// methods get errors and the gateway keeps serving.
func TestHTTPIdentityAndMalformedRequests(t *testing.T) {
	r := newRig(t, nil)
	srv := httptest.NewServer(mcpgateway.Handler([]*mcpgateway.Gateway{r.gateway}, mcpgateway.Callers{mcpgateway.HashToken("dana-token"): "dana"}))
	defer srv.Close()
	endpoint := srv.URL + "/mcp/notes"

	post := func(token, body string) (int, string) {
		req, _ := http.NewRequest("POST", endpoint, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post("wrong", `{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d", code)
	}
	if code, body := post("dana-token", `{"jsonrpc":"2.0","id":1,"method":`); code != http.StatusBadRequest {
		t.Fatalf("malformed JSON: %d %s", code, body)
	}

	c := mcp.NewClient(&mcp.Implementation{Name: "http-client"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{"dana-token"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// An unknown method is refused, naming it, and the session carries on.
	req, _ := http.NewRequest("POST", endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/explode"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer dana-token")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"tools/explode" unsupported`) {
		t.Fatalf("unknown method: %d %s", resp.StatusCode, body)
	}

	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"id": "h"}})
		if err != nil {
			t.Errorf("call: %v", err)
		}
		done <- res
	}()
	id := r.serve.pending(t, "mcp:dana:notes", "notes.delete_note")
	rec := r.serve.approvals(t, "mcp:dana:notes")[0]
	if rec.Request.Run.RequestedBy != "dana" {
		t.Fatalf("requested_by %q, want the caller", rec.Request.Run.RequestedBy)
	}
	r.serve.cli(t, "approvals", "approve", id)
	if res := receive(t, done); res == nil || res.IsError || len(r.notes.all()) != 1 {
		t.Fatalf("approved HTTP call: %s, upstream %q", text(res), r.notes.all())
	}
}
