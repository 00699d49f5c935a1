package mcpgateway_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listener is a client of the gateway that records the notifications it
// gets.
type listener struct {
	session                  *mcp.ClientSession
	tools, prompts, resLists chan struct{}
	updated                  chan string
}

func listen(t *testing.T, r *rig, version string) *listener {
	t.Helper()
	l := &listener{tools: make(chan struct{}, 10), prompts: make(chan struct{}, 10), resLists: make(chan struct{}, 10), updated: make(chan string, 10)}
	l.session = r.connect(t, &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { offer(l.tools, struct{}{}) },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { offer(l.prompts, struct{}{}) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { offer(l.resLists, struct{}{}) },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			offer(l.updated, req.Params.URI)
		},
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if got := l.session.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	return l
}

// When the upstream's tools, prompts or resources change, the clients are
// told and their next list shows the change; a tool that changed its
// annotations is reviewed with the new ones. resources/subscribe and
// unsubscribe reach the upstream, and notifications/resources/updated reach
// the subscribed client. On protocol 2026-07-28 (subscriptions/listen) and
// on 2025-11-25.
func TestListChangedAndSubscriptionsPassThrough(t *testing.T) {
	s := startServe(t)
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			r := newRigOn(t, s, nil)
			l := listen(t, r, version)
			ctx := t.Context()
			if got := r.callOn(t, l.session, "read_note", `{"id":"before"}`); got.IsError {
				t.Fatalf("read_note: %s", text(got))
			}

			// read_note turns destructive, archive_note is new.
			r.upstream.AddTool(&mcp.Tool{Name: "read_note", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					r.notes.add("read_note (destructive)", nil)
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "read and burnt"}}}, nil
				})
			r.upstream.AddTool(&mcp.Tool{Name: "archive_note", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "archived"}}}, nil
				})
			receive(t, l.tools)
			tools, err := l.session.ListTools(ctx, nil)
			if err != nil || !slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "archive_note" }) {
				t.Fatalf("tools after the change: %v %v", tools, err)
			}
			if got := r.callOn(t, l.session, "archive_note", `{}`); got.IsError || !strings.Contains(text(got), "archived") {
				t.Fatalf("archive_note: %s", text(got))
			}
			// Reviewed with its new annotations: held, not run at once.
			held := r.callAsyncOn(t, l.session, "read_note", `{"id":"after"}`)
			id := r.serve.pending(t, r.runID, "notes.read_note")
			r.serve.cli(t, "approvals", "reject", id, "--reason", "not now")
			if got := receive(t, held); !got.IsError || !strings.Contains(text(got), "not now") {
				t.Fatalf("read_note after it turned destructive: %s", text(got))
			}
			if slices.ContainsFunc(r.notes.all(), func(c string) bool { return strings.HasPrefix(c, "read_note (destructive)") }) {
				t.Fatal("a rejected call ran")
			}

			r.upstream.AddPrompt(&mcp.Prompt{Name: "triage"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{}, nil
			})
			receive(t, l.prompts)
			prompts, err := l.session.ListPrompts(ctx, nil)
			if err != nil || !slices.ContainsFunc(prompts.Prompts, func(p *mcp.Prompt) bool { return p.Name == "triage" }) {
				t.Fatalf("prompts after the change: %v %v", prompts, err)
			}

			r.upstream.AddResource(&mcp.Resource{URI: "notes://archive", Name: "archive"},
				func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
					return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "notes://archive", Text: "old"}}}, nil
				})
			receive(t, l.resLists)
			res, err := l.session.ListResources(ctx, nil)
			if err != nil || !slices.ContainsFunc(res.Resources, func(x *mcp.Resource) bool { return x.URI == "notes://archive" }) {
				t.Fatalf("resources after the change: %v %v", res, err)
			}

			checkSubscription(t, r, l)
		})
	}
}

// offer sends v unless ch is full.
func offer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// checkSubscription subscribes l to notes://index: the upstream is told,
// its update reaches l, and the unsubscription reaches the upstream.
func checkSubscription(t *testing.T, r *rig, l *listener) {
	t.Helper()
	ctx := t.Context()
	if err := l.session.Subscribe(ctx, &mcp.SubscribeParams{URI: "notes://index"}); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, r.notes.subs); got != "subscribe notes://index" {
		t.Fatalf("upstream: %s", got)
	}
	// The upstream's SDK registers the subscription right after
	// its handler returned, with nothing to observe in between:
	// the update is sent until one arrives.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		if err := r.upstream.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "notes://index"}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-l.updated:
			if got != "notes://index" {
				t.Fatalf("updated %s", got)
			}
			done = true
		case <-tick.C:
		case <-deadline:
			t.Fatal("no notifications/resources/updated reached the subscribed client")
		}
	}
	if err := l.session.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "notes://index"}); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, r.notes.subs); got != "unsubscribe notes://index" {
		t.Fatalf("upstream: %s", got)
	}
}
