package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/countersigntest"
)

const historyGatePolicy = `
version: "history-t1"
default: require_approval
rules:
  - name: busy
    tools: [pay]
    when: 'history.count("pay", duration("1h")) >= 2'
    action: require_approval
    quorum: 2
    approvers: [ann, bob]
  - name: pay
    tools: [pay]
    action: require_approval
    approvers: [ann, bob]
`

// TestGateHistoryConditions: two gates on one bus review alternate calls
// of one agent; each call is decided with the count of the calls before
// it, whichever gate reviewed them, its request carries the figure, and
// the arbiter accepts it with that figure. A request that carries no
// figure is held to the strictest rule and refused.
func TestGateHistoryConditions(t *testing.T) {
	e := setup(t)
	p := countersigntest.Policy(t, historyGatePolicy)
	gates := []*orchestrator.Gate{
		countersigntest.Gate(t, e.srv.JetStreamAs(embedded.RoleOrchestrator), orchestrator.StaticPolicy{P: p}),
		countersigntest.Gate(t, e.srv.JetStreamAs(embedded.RoleOrchestrator), orchestrator.StaticPolicy{P: p}),
	}
	var recs []*contracts.Record
	for i := range 4 {
		vs, err := gates[i%2].Submit(context.Background(), run, []orchestrator.ToolCall{
			{ID: fmt.Sprint("h", i), Name: "pay", Arguments: json.RawMessage(`{"amount":5}`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := "pay"
		if i >= 2 {
			want = "busy"
		}
		rec := e.waitRecord(t, vs[0].EventID, pending)
		h := rec.Request.History
		if vs[0].Rule != want || rec.Request.Policy.Rule != want || len(h) != 1 || h[0].Value != float64(i) || h[0].Func != "count" {
			t.Errorf("call %d: rule %s, request %s with figures %+v; want %s with a count of %d", i, vs[0].Rule, rec.Request.Policy.Rule, h, want, i)
		}
		recs = append(recs, rec)
	}
	// The same request without its figures: the condition errors, the
	// strictest rule (busy, two approvers) decides, and quorum 1 is weaker.
	forged := recs[0].Request
	forged.EventID, forged.ToolCall.ID, forged.History = "0195aaaa-0000-7000-8000-000000000001", "forged", nil
	if _, err := events.Publish(context.Background(), e.js, contracts.ToolRequestedSubject(run.Agent), forged, forged.EventID, nil); err != nil {
		t.Fatal(err)
	}
	rec := e.waitRecord(t, forged.EventID, func(r *contracts.Record) bool { return r.Status != contracts.StatusPending })
	if rec.Status != contracts.StatusRejected || rec.Outcome == nil || !strings.HasPrefix(rec.Outcome.Reason, "request_refused:") {
		t.Errorf("a request without its figures: %s %+v, want rejected, request_refused", rec.Status, rec.Outcome)
	}
}
