package mcpgateway_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/mcpgateway"
)

// Tools, resources and prompts pass through; a read-only tool runs at once;
// a destructive one is held, approved from the CLI, and the upstream
// receives exactly the approved arguments, once, while the client is kept
// waiting with progress notifications.
func TestListReadOnlyAndApprovedDestructive(t *testing.T) {
	r := newRig(t, nil)
	ctx := t.Context()
	tools, err := r.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Name == "delete_note" && (tl.Annotations == nil || tl.Annotations.DestructiveHint == nil || !*tl.Annotations.DestructiveHint) {
			t.Errorf("delete_note lost its annotations: %+v", tl.Annotations)
		}
	}
	if !slices.Contains(names, "read_note") || !slices.Contains(names, "delete_note") {
		t.Fatalf("tools: %v", names)
	}
	res, err := r.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://index"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "a, b, c" {
		t.Fatalf("read resource: %+v %v", res, err)
	}
	pr, err := r.session.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize"})
	if err != nil || len(pr.Messages) != 1 {
		t.Fatalf("get prompt: %+v %v", pr, err)
	}

	got := r.call(t, "read_note", `{"id":"a"}`)
	if got.IsError || !strings.Contains(text(got), `note {"id":"a"}`) {
		t.Fatalf("read_note: %s", text(got))
	}
	if m, _ := got.Meta["countersign"].(map[string]any); m["verdict"] != "allowed" || m["rule"] != "mcp-read-only" || m["event_id"] != nil {
		t.Fatalf("the allowed call's _meta: %v", got.Meta)
	}
	if len(r.serve.approvals(t, r.runID)) != 0 {
		t.Fatal("a read-only call created an approval")
	}

	done := r.callAsync(t, "delete_note", `{"id": "b"}`)
	id := r.serve.pending(t, r.runID, "notes.delete_note")
	rec := r.serve.approvals(t, r.runID)[0]
	if l := rec.Request.Run.Labels; l[mcpgateway.LabelDestructive] != "true" || l[mcpgateway.LabelServer] != "notes" || rec.Request.Policy.Rule != "mcp-destructive" {
		t.Fatalf("request: labels %v, rule %q", l, rec.Request.Policy.Rule)
	}
	if rec.Request.Run.RequestedBy != "carol" {
		t.Fatalf("requested_by %q", rec.Request.Run.RequestedBy)
	}
	p := receive(t, r.progress)
	if p.ProgressToken != "tok-delete_note" || !strings.Contains(p.Message, id) {
		t.Fatalf("progress: %+v", p)
	}
	if slices.ContainsFunc(r.notes.all(), func(c string) bool { return strings.HasPrefix(c, "delete_note") }) {
		t.Fatal("the upstream ran a held call")
	}
	r.serve.cli(t, "approvals", "approve", id, "--comment", "ok")
	got = receive(t, done)
	if got.IsError || !strings.Contains(text(got), `deleted {"id":"b"}`) {
		t.Fatalf("approved delete_note: %s", text(got))
	}
	want := []string{`read_note {"id":"a"}`, `delete_note {"id":"b"}`}
	if calls := r.notes.all(); !slices.Equal(calls, want) {
		t.Fatalf("upstream calls %q, want %q", calls, want)
	}
	rec = r.serve.approvals(t, r.runID)[0]
	if rec.Claim == nil {
		t.Fatal("the approval was not claimed before the call ran")
	}
	// The gateway reported how the call ended, as its claimant.
	if x := rec.Execution; x == nil || x.Status != contracts.ExecutionSucceeded || x.ReportedBy != rec.Claim.By || len(x.ResultSHA256) != 64 {
		t.Fatalf("the approved call's outcome: %+v", rec.Execution)
	}
	// The same call again is a new request, not a second run of the first.
	again := r.callAsync(t, "delete_note", `{"id":"b"}`)
	id2 := r.serve.pending(t, r.runID, "notes.delete_note")
	if id2 == id {
		t.Fatal("a new identical call re-used an approval that was used up")
	}
	r.serve.cli(t, "approvals", "reject", id2, "--reason", "once is enough")
	if got := receive(t, again); !got.IsError || !strings.Contains(text(got), "once is enough") {
		t.Fatalf("second call: %s", text(got))
	}
	if calls := r.notes.all(); len(calls) != 2 {
		t.Fatalf("upstream calls %q", calls)
	}
}

// A rejection reaches the model with its reason and the upstream is never
// called; an edit runs with the edited arguments.
func TestRejectAndEdit(t *testing.T) {
	r := newRig(t, nil)
	done := r.callAsync(t, "delete_note", `{"id":"keep"}`)
	id := r.serve.pending(t, r.runID, "notes.delete_note")
	r.serve.cli(t, "approvals", "reject", id, "--reason", "that note is still needed")
	got := receive(t, done)
	if !got.IsError || !strings.Contains(text(got), "that note is still needed") {
		t.Fatalf("rejected: %s", text(got))
	}
	if calls := r.notes.all(); len(calls) != 0 {
		t.Fatalf("the upstream was called: %q", calls)
	}

	done = r.callAsync(t, "delete_note", `{"id":"everything"}`)
	id = r.serve.pending(t, r.runID, "notes.delete_note")
	r.serve.cli(t, "approvals", "edit", id, "--json", `{"id":"old-drafts"}`, "--comment", "only the drafts")
	got = receive(t, done)
	if got.IsError || !strings.Contains(text(got), `deleted {"id":"old-drafts"}`) || !strings.Contains(text(got), "changed the arguments") {
		t.Fatalf("edited: %s", text(got))
	}
	if calls := r.notes.all(); !slices.Equal(calls, []string{`delete_note {"id":"old-drafts"}`}) {
		t.Fatalf("upstream calls %q", calls)
	}
}

// Past MaxWait the model is told the call awaits approval; calling again
// with the same arguments (in another key order) re-attaches to the same
// approval and, once approved, runs once.
func TestAwaitingApprovalReattaches(t *testing.T) {
	r := newRig(t, func(c *mcpgateway.Config) { c.MaxWait = 300 * time.Millisecond })
	got := r.call(t, "delete_note", `{"id":"x","why":"old"}`)
	recs := r.serve.approvals(t, r.runID)
	if len(recs) != 1 {
		t.Fatalf("%d approvals", len(recs))
	}
	id := recs[0].Request.EventID
	if !got.IsError || !strings.Contains(text(got), "awaiting human approval") || !strings.Contains(text(got), id) ||
		!strings.Contains(text(got), "same arguments") {
		t.Fatalf("awaiting: %s", text(got))
	}
	if m, _ := got.Meta["countersign"].(map[string]any); m["event_id"] != id || m["verdict"] != "pending" {
		t.Fatalf("meta: %v", got.Meta)
	}
	got = r.call(t, "delete_note", `{"why":"old","id":"x"}`)
	if !strings.Contains(text(got), id) || len(r.serve.approvals(t, r.runID)) != 1 {
		t.Fatalf("second call did not re-attach: %s", text(got))
	}
	r.serve.cli(t, "approvals", "approve", id)
	got = r.call(t, "delete_note", `{"id":"x","why":"old"}`)
	if got.IsError || len(r.notes.all()) != 1 {
		t.Fatalf("after approval: %s, upstream %q", text(got), r.notes.all())
	}
}

// Bad input never reaches the upstream: arguments that are not an object,
// oversized arguments, an unknown tool (gated by the default), an upstream
// that dies in the middle of a call (the gateway reconnects for the next),
// and Countersign out of reach (fail closed).
func TestBadInputAndFailures(t *testing.T) {
	r := newRig(t, func(c *mcpgateway.Config) { c.MaxArguments = 1024; c.MaxWait = 200 * time.Millisecond })
	ctx := t.Context()
	_, err := r.session.CallTool(ctx, &mcp.CallToolParams{Name: "read_note", Arguments: []int{1, 2}})
	if err == nil || !strings.Contains(err.Error(), "arguments must be a JSON object") {
		t.Fatalf("array arguments: %v", err)
	}
	got := r.call(t, "read_note", `{"id":"`+strings.Repeat("x", 2000)+`"}`)
	if !got.IsError || !strings.Contains(text(got), "over this gateway's limit of 1024 bytes") {
		t.Fatalf("oversized: %s", text(got))
	}
	got = r.call(t, "no_such_tool", `{}`)
	if !got.IsError || !strings.Contains(text(got), "awaiting human approval") {
		t.Fatalf("unknown tool: %s", text(got))
	}
	got = r.call(t, "crash", `{}`)
	if !got.IsError || !strings.Contains(text(got), "failed during the call") {
		t.Fatalf("crash: %s", text(got))
	}
	got = r.call(t, "read_note", `{"id":"after"}`)
	if got.IsError {
		t.Fatalf("after the upstream crashed: %s", text(got))
	}
	want := []string{`crash {}`, `read_note {"id":"after"}`}
	if calls := r.notes.all(); !slices.Equal(calls, want) {
		t.Fatalf("upstream calls %q, want %q", calls, want)
	}

	// Countersign out of reach: nothing is forwarded, read-only or not.
	down := newRigOn(t, r.serve, func(c *mcpgateway.Config) {
		cs := *r.serve
		cs.url = "http://127.0.0.1:1"
		c.Countersign = cs.client(t)
	})
	for _, tool := range []string{"read_note", "delete_note"} {
		got := down.call(t, tool, `{"id":"z"}`)
		if !got.IsError || !strings.Contains(text(got), "could not review") {
			t.Fatalf("%s without Countersign: %s", tool, text(got))
		}
	}
	if calls := down.notes.all(); len(calls) != 0 {
		t.Fatalf("forwarded without a review: %q", calls)
	}
}

// An upstream's elicitation goes to the approvers as a human-input request
// when the client does not support elicitation; the answer comes back.
func TestElicitationGoesToApprovers(t *testing.T) {
	r := newRig(t, nil)
	done := r.callAsync(t, "ask_name", `{}`)
	var id string
	deadline := time.Now().Add(30 * time.Second)
	for id == "" && time.Now().Before(deadline) {
		for _, rec := range r.serve.approvals(t, r.runID) {
			if rec.Request.Kind == contracts.KindHumanInput && rec.Status == contracts.StatusPending {
				id = rec.Request.EventID
				if !strings.Contains(rec.Request.Question.Text, "Which name?") || !strings.Contains(string(rec.Request.Question.Schema), `"name"`) {
					t.Fatalf("question: %+v", rec.Request.Question)
				}
				// Labelled as a question of the tool that asked it, with
				// none of a tool's hints: no rule for destructive tools.
				want := map[string]string{mcpgateway.LabelKind: mcpgateway.KindQuestion, mcpgateway.LabelServer: "notes", mcpgateway.LabelTool: "ask_name"}
				if l := rec.Request.Run.Labels; !maps.Equal(l, want) || rec.Request.Policy.Rule == "mcp-destructive" || rec.Request.Risk == "high" {
					t.Fatalf("question: labels %v, rule %q, risk %q", l, rec.Request.Policy.Rule, rec.Request.Risk)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("no human-input request")
	}
	r.serve.cli(t, "approvals", "answer", id, "--json", `{"name":"Ada"}`)
	got := receive(t, done)
	var res mcp.ElicitResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(text(got))), &res); err != nil || res.Action != "accept" || res.Content["name"] != "Ada" {
		t.Fatalf("elicitation result: %s", text(got))
	}
}

// Whether an approval is used up is Countersign's record, not the
// gateway's memory: after a gateway stops and another starts on the same
// run, the identical call opens a new approval instead of running again.
// Two identical calls waiting on one approval: once approved, one of them
// claims it and runs, the other becomes a new request.
func TestUsedUpApprovalsSurviveARestart(t *testing.T) {
	s := startServe(t)
	first := newRigOn(t, s, nil)
	done := first.callAsync(t, "delete_note", `{"id":"r"}`)
	id := s.pending(t, first.runID, "notes.delete_note")
	s.cli(t, "approvals", "approve", id)
	if got := receive(t, done); got.IsError || len(first.notes.all()) != 1 {
		t.Fatalf("approved call: %s, upstream %q", text(got), first.notes.all())
	}
	first.session.Close()
	first.gateway.Close()

	second := newRigOn(t, s, func(c *mcpgateway.Config) { c.MaxWait = 300 * time.Millisecond })
	got := second.call(t, "delete_note", `{"id":"r"}`)
	recs := s.approvals(t, second.runID)
	if !strings.Contains(text(got), "awaiting human approval") || strings.Contains(text(got), id) || len(recs) != 2 {
		t.Fatalf("the identical call after the restart: %s (%d approvals; the used-up one is %s)", text(got), len(recs), id)
	}
	if calls := append(first.notes.all(), second.notes.all()...); len(calls) != 1 {
		t.Fatalf("upstream calls %q, want the approved one once", calls)
	}
	m, _ := got.Meta["countersign"].(map[string]any)
	s.cli(t, "approvals", "cancel", m["event_id"].(string))
}

// Identical calls waiting on one approval — two clients of one gateway and
// a client of a second gateway on the same run — run exactly once when it
// is approved: one of them claims it and runs it, the others are told that
// an identical call ran it, and no second approval is opened.
func TestIdenticalCallsRunOnce(t *testing.T) {
	s := startServe(t)
	first := newRigOn(t, s, nil)
	second := newRigOn(t, s, nil)
	type waiting struct {
		done     <-chan *mcp.CallToolResult
		progress chan *mcp.ProgressNotificationParams
	}
	start := func(r *rig) waiting {
		progress := make(chan *mcp.ProgressNotificationParams, 100)
		cs := r.connect(t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			offer(progress, req.Params)
		}}, nil)
		return waiting{done: r.callAsyncOn(t, cs, "delete_note", `{"id":"twice"}`), progress: progress}
	}
	calls := []waiting{start(first)}
	id := s.pending(t, first.runID, "notes.delete_note")
	calls = append(calls, start(first), start(second))
	for i, c := range calls { // every call waits on the approval
		if p := receive(t, c.progress); !strings.Contains(p.Message, id) {
			t.Fatalf("call %d waits on %q, want %s", i, p.Message, id)
		}
	}
	s.cli(t, "approvals", "approve", id)
	ran, told := 0, 0
	for i, c := range calls {
		res := receive(t, c.done)
		m, _ := res.Meta["countersign"].(map[string]any)
		switch {
		case !res.IsError && strings.Contains(text(res), `deleted {"id":"twice"}`):
			ran++
		case res.IsError && strings.Contains(text(res), "identical call") && strings.Contains(text(res), id) &&
			m["verdict"] == "already_executed" && m["event_id"] == id:
			told++
		default:
			t.Fatalf("call %d: %s (meta %v)", i, text(res), res.Meta)
		}
	}
	upstream := append(deletes(first.notes), deletes(second.notes)...)
	if ran != 1 || told != 2 || len(upstream) != 1 {
		t.Fatalf("%d ran, %d told, upstream %q", ran, told, upstream)
	}
	if recs := s.approvals(t, first.runID); len(recs) != 1 {
		t.Fatalf("%d approvals, want the one approved", len(recs))
	}
}

// An identical call that comes while the gateway runs an approved call is
// the same call: it is told so at once, and no second approval is opened.
func TestIdenticalCallWhileTheFirstRuns(t *testing.T) {
	r := newRig(t, nil)
	r.notes.entered, r.notes.release = make(chan string, 10), make(chan struct{})
	first := r.callAsync(t, "archive_note", `{"id":"a"}`)
	id := r.serve.pending(t, r.runID, "notes.archive_note")
	r.serve.cli(t, "approvals", "approve", id)
	receive(t, r.notes.entered) // the upstream runs the approved call
	other := r.connect(t, nil, nil)
	got := r.callOn(t, other, "archive_note", `{"id":"a"}`)
	if m, _ := got.Meta["countersign"].(map[string]any); !got.IsError || !strings.Contains(text(got), "identical call") ||
		m["verdict"] != "already_executed" || m["event_id"] != id {
		t.Fatalf("the identical call while the first runs: %s (meta %v)", text(got), got.Meta)
	}
	close(r.notes.release)
	if res := receive(t, first); res.IsError || !strings.Contains(text(res), `archived {"id":"a"}`) {
		t.Fatalf("the approved call: %s", text(res))
	}
	if calls := r.notes.all(); len(calls) != 1 {
		t.Fatalf("upstream calls %q", calls)
	}
	if recs := r.serve.approvals(t, r.runID); len(recs) != 1 {
		t.Fatalf("%d approvals, want the one approved", len(recs))
	}
}
