package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

func TestReviewAllowDenyPending(t *testing.T) {
	e := setup(t)
	res := e.review(t, "", contracts.Run{ID: "run-1", Agent: "billing-bot"},
		toolCall{ID: "a", Name: "search_web", Arguments: json.RawMessage(`{"q":"x"}`)},
		toolCall{ID: "b", Name: "shell.exec", Arguments: json.RawMessage(`{"cmd":"ls"}`)},
		toolCall{ID: "c", Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)},
	)
	if res[0].Verdict != orchestrator.VerdictAllowed || res[0].ToolCallID != "a" || string(res[0].Arguments) != `{"q":"x"}` {
		t.Fatalf("search_web: %+v", res[0])
	}
	if res[1].Verdict != orchestrator.VerdictDenied || res[1].Reason != "Shell is off limits." || res[1].Rule != "no-shell" {
		t.Fatalf("shell.exec: %+v", res[1])
	}
	if res[2].Verdict != orchestrator.VerdictPending || res[2].EventID != orchestrator.EventID(contracts.Run{ID: "run-1", Agent: "billing-bot"}, "c") {
		t.Fatalf("deploy: %+v", res[2])
	}
	// The approval can be read as soon as the review answered; the calling
	// token is not taken for the requester.
	r := e.call(t, "GET", "/v1/approvals/"+res[2].EventID, "alice", nil)
	if r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	var rec recordAnswer
	r.decode(t, &rec)
	if rec.Record.Status != contracts.StatusPending || rec.Revision == 0 || rec.Record.Request.Run.RequestedBy != "" {
		t.Fatalf("record: status %s revision %d requested_by %q", rec.Record.Status, rec.Revision, rec.Record.Request.Run.RequestedBy)
	}
	// The same ids with other arguments are refused.
	r = e.call(t, "POST", "/v1/reviews", "agent", reviewBody(contracts.Run{ID: "run-1", Agent: "billing-bot"},
		toolCall{ID: "c", Name: "deploy", Arguments: json.RawMessage(`{"env":"dev"}`)}))
	r.wantError(t, http.StatusConflict, "arguments_changed", "")
}

func TestReviewWaitReturnsRejectionReason(t *testing.T) {
	e := setup(t)
	// Calls without ids get a fresh approval each time; the test learns its
	// id from the bucket.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := e.kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type answer struct{ res []result }
	ch := make(chan answer, 1)
	go func() {
		ch <- answer{e.review(t, "?wait=30s", contracts.Run{Agent: "billing-bot"}, toolCall{Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)})}
	}()
	var eventID string
	for eventID == "" {
		select {
		case entry := <-w.Updates():
			if entry != nil {
				eventID = entry.Key()
			}
		case <-ctx.Done():
			t.Fatal("no approval was created")
		}
	}
	r := e.vote(t, "bob", eventID, map[string]any{"decision": "reject", "comment": "wrong vendor"})
	if r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	select {
	case a := <-ch:
		v := a.res[0]
		if v.Verdict != orchestrator.VerdictDenied || v.EventID != eventID ||
			v.Reason != "A human reviewer rejected this tool call. Reason: wrong vendor" {
			t.Fatalf("verdict %+v", v)
		}
	case <-ctx.Done():
		t.Fatal("the waiting review did not return")
	}
}

func TestReviewWaitElapsesPending(t *testing.T) {
	e := setup(t)
	res := e.review(t, "?wait=50ms", contracts.Run{ID: "r", Agent: "billing-bot"}, toolCall{ID: "x", Name: "deploy"})
	if res[0].Verdict != orchestrator.VerdictPending || res[0].EventID == "" {
		t.Fatalf("%+v", res[0])
	}
	// Once decided, a re-review returns the verdict and the final arguments.
	e.approve(t, "bob", res[0].EventID)
	res = e.review(t, "?wait=30s", contracts.Run{ID: "r", Agent: "billing-bot"}, toolCall{ID: "x", Name: "deploy"})
	if res[0].Verdict != orchestrator.VerdictAllowed || string(res[0].Arguments) != `{}` {
		t.Fatalf("%+v", res[0])
	}
}

func TestReviewValidation(t *testing.T) {
	e := setup(t)
	run := map[string]any{"agent": "a"}
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"malformed", `{"run":`, 400, "invalid_json", ""},
		{"not an object", `[1,2]`, 400, "invalid_json", ""},
		{"trailing data", `{"run":{"agent":"a"},"tool_calls":[{"name":"x"}]} {}`, 400, "invalid_json", ""},
		{"empty", ``, 400, "invalid_json", ""},
		{"unknown field", map[string]any{"run": run, "tool_calls": []any{map[string]any{"name": "x", "nme": 1}}}, 400, "unknown_field", "tool_calls[0].nme"},
		{"unknown top-level field", map[string]any{"run": run, "tool_calls": []any{}, "extra": true}, 400, "unknown_field", "extra"},
		{"field names are case-sensitive", map[string]any{"Run": run}, 400, "unknown_field", "Run"},
		{"wrong type", map[string]any{"run": run, "tool_calls": []any{map[string]any{"name": 5}}}, 400, "invalid_json", "tool_calls[0].name"},
		{"wrong nested type", map[string]any{"run": map[string]any{"agent": []int{1}}}, 400, "invalid_json", "run.agent"},
		{"missing agent", map[string]any{"run": map[string]any{}, "tool_calls": []any{map[string]any{"name": "x"}}}, 400, "invalid_field", "run.agent"},
		{"no calls", map[string]any{"run": run, "tool_calls": []any{}}, 400, "invalid_field", "tool_calls"},
		{"missing name", map[string]any{"run": run, "tool_calls": []any{map[string]any{"id": "1"}}}, 400, "invalid_field", "tool_calls[0].name"},
		{"duplicate id", map[string]any{"run": run, "tool_calls": []any{map[string]any{"id": "1", "name": "x"}, map[string]any{"id": "1", "name": "y"}}}, 400, "invalid_field", "tool_calls[1].id"},
		{"array arguments", map[string]any{"run": run, "tool_calls": []any{map[string]any{"name": "x", "arguments": []int{1}}}}, 400, "invalid_arguments", "tool_calls[0].arguments"},
		{"string arguments", map[string]any{"run": run, "tool_calls": []any{map[string]any{"name": "x"}, map[string]any{"name": "y", "arguments": "{}"}}}, 400, "invalid_arguments", "tool_calls[1].arguments"},
		{"duplicate argument keys", `{"run":{"agent":"a"},"tool_calls":[{"name":"x","arguments":{"a":1,"a":2}}]}`, 400, "invalid_arguments", "tool_calls[0].arguments.a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.call(t, "POST", "/v1/reviews", "agent", c.body).wantError(t, c.status, c.code, c.field)
		})
	}
	if r := e.call(t, "POST", "/v1/reviews?wait=soon", "agent", reviewBody(contracts.Run{Agent: "a"}, toolCall{Name: "x"})); r.status != 400 {
		t.Fatalf("bad wait: %d", r.status)
	}
	// Nothing of the refused requests reached the bus.
	info, err := e.js.Stream(context.Background(), contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d requests published by refused reviews", n)
	}
}

func TestBodyTooLarge(t *testing.T) {
	e := setup(t)
	body := make([]byte, 1<<20+1)
	for i := range body {
		body[i] = ' '
	}
	e.call(t, "POST", "/v1/reviews", "agent", body).wantError(t, http.StatusRequestEntityTooLarge, "body_too_large", "")
	// Exactly 1 MiB is accepted (and then judged on its content).
	e.call(t, "POST", "/v1/reviews", "agent", body[:1<<20]).wantError(t, http.StatusBadRequest, "invalid_json", "")
}

// A review under the body limit whose request would not fit the bus's
// max payload is refused as too large (the size budget catches it before
// the bus does), and nothing is published.
func TestReviewTooLargeForTheBus(t *testing.T) {
	e := setup(t)
	memo := strings.Repeat("x", 1<<20-300)
	body := `{"run":{"id":"run-big","agent":"billing-bot"},"tool_calls":[{"id":"c1","name":"payments.send","arguments":{"memo":"` + memo + `"}}]}`
	e.call(t, "POST", "/v1/reviews", "agent", body).wantError(t, http.StatusRequestEntityTooLarge, "too_large", "tool_calls[0].arguments")
	info, err := e.js.Stream(context.Background(), contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d requests published", n)
	}
}
