package mcpgateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/services/mcpgateway"
)

const receiptsPolicy = `
version: "mcp-receipts-1"
default: require_approval
rules:
  - name: notes-read
    agents: ["mcp*"]
    tools: ["notes.read_note"]
    action: allow
    receipt: true
  - name: notes-list
    agents: ["mcp*"]
    tools: ["notes.list_notes"]
    action: allow
  - name: mcp-destructive
    agents: ["mcp*"]
    labels: {mcp.destructiveHint: "true"}
    action: require_approval
`

// strictNotes is an upstream that runs a call only with a valid receipt in
// _meta["countersign/receipt"], verified with contracts/receipt against
// Countersign's published keys; it remembers what it ran, and on what basis.
type strictNotes struct {
	opts receipt.Options
	mu   sync.Mutex
	ran  []string // "tool basis"
	seen []any    // the _meta receipt of every call, verified or not
}

func (u *strictNotes) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "strict-notes", Version: "1.0.0"}, nil)
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tok, _ := req.Params.Meta[mcpgateway.ReceiptMetaKey].(string)
		u.mu.Lock()
		u.seen = append(u.seen, req.Params.Meta[mcpgateway.ReceiptMetaKey])
		u.mu.Unlock()
		// The gateway reviews the tool as NAME.TOOL: that is the receipt's tool.
		c, err := receipt.Verify(ctx, tok, "notes."+req.Params.Name, req.Params.Arguments, u.opts)
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "refused: " + receipt.Code(err)}}}, nil
		}
		u.mu.Lock()
		u.ran = append(u.ran, req.Params.Name+" "+c.Basis)
		u.mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done " + req.Params.Name}}}, nil
	}
	for _, tl := range []*mcp.Tool{
		{Name: "read_note", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "list_notes", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "delete_note", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
	} {
		s.AddTool(tl, handler)
	}
	return s
}

func (u *strictNotes) state() ([]string, []any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.ran...), append([]any(nil), u.seen...)
}

func dialTo(s *mcp.Server) func(*mcpgateway.Config) {
	return func(cfg *mcpgateway.Config) {
		cfg.Dial = func(ctx context.Context, c *mcp.Client) (*mcp.ClientSession, error) {
			t1, t2 := mcp.NewInMemoryTransports()
			if _, err := s.Connect(ctx, t1, nil); err != nil {
				return nil, err
			}
			return c.Connect(ctx, t2, nil)
		}
	}
}

// An upstream that wants receipts gets, in each call's _meta, the receipt
// Countersign signed for it: the API's for a rule with receipt: true, the
// arbiter's for an approved call, which the gateway claims. A call
// Countersign gives no receipt for is refused before it reaches the
// upstream, and a receipt the client put in _meta is never forwarded.
func TestReceiptsForwardedToUpstream(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(receiptsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServeWith(t, pol)
	keys, err := receipt.NewFetcher(receipt.FetcherConfig{URL: s.url + "/.well-known/jwks.json"})
	if err != nil {
		t.Fatal(err)
	}
	up := &strictNotes{opts: receipt.Options{Keys: keys, Replay: receipt.NewMemoryReplayStore()}}
	r := newRigOn(t, s, func(cfg *mcpgateway.Config) {
		dialTo(up.server())(cfg)
		cfg.Receipts = true
	})
	ctx := t.Context()

	// Allowed by the policy with a receipt; the client's own _meta receipt is replaced.
	p := &mcp.CallToolParams{Name: "read_note", Arguments: json.RawMessage(`{"id": "a"}`), Meta: mcp.Meta{mcpgateway.ReceiptMetaKey: "forged", "trace": "t-1"}}
	got, err := r.session.CallTool(ctx, p)
	if err != nil || got.IsError || !strings.Contains(text(got), "done read_note") {
		t.Fatalf("read_note: %v %s", err, text(got))
	}
	// The result tells the client it was allowed, by which rule, with which receipt.
	if m, _ := got.Meta["countersign"].(map[string]any); m["verdict"] != "allowed" || m["rule"] == nil || m["receipt"] == nil || m["receipt"] == "" {
		t.Fatalf("the allowed call's _meta: %v", got.Meta)
	}

	// Allowed by a rule without receipt: true: refused by the gateway.
	got = r.call(t, "list_notes", `{}`)
	if !got.IsError || !strings.Contains(text(got), "receipt") || !strings.Contains(text(got), "was not made") {
		t.Fatalf("list_notes without a receipt: %s", text(got))
	}

	// Approved by a human: the claim's receipt.
	done := r.callAsync(t, "delete_note", `{"id": "b"}`)
	id := s.pending(t, r.runID, "notes.delete_note")
	s.cli(t, "approvals", "approve", id)
	got = receive(t, done)
	if got.IsError || !strings.Contains(text(got), "done delete_note") {
		t.Fatalf("approved delete_note: %s", text(got))
	}
	if m, _ := got.Meta["countersign"].(map[string]any); m["verdict"] != "allowed" || m["event_id"] != id || m["receipt"] == nil {
		t.Fatalf("the approved call's _meta: %v", got.Meta)
	}

	ran, seen := up.state()
	if strings.Join(ran, ",") != "read_note policy,delete_note approval" {
		t.Fatalf("the upstream ran %q", ran)
	}
	if len(seen) != 2 || seen[0] == "forged" {
		t.Fatalf("the upstream saw receipts %v", seen)
	}

	// A gateway whose upstream wants no receipts forwards none, not even the client's.
	plain := &strictNotes{opts: up.opts}
	r2 := newRigOn(t, s, dialTo(plain.server()))
	got, err = r2.session.CallTool(ctx, &mcp.CallToolParams{Name: "read_note", Arguments: json.RawMessage(`{"id": "c"}`),
		Meta: mcp.Meta{mcpgateway.ReceiptMetaKey: "forged"}})
	if err != nil || !got.IsError || !strings.Contains(text(got), "receipt_missing") {
		t.Fatalf("read_note through a gateway without receipts: %v %s", err, text(got))
	}
	if _, seen := plain.state(); len(seen) != 1 || seen[0] != nil {
		t.Fatalf("forwarded %v", seen)
	}
}
