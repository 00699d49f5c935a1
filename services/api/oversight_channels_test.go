package api_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api/oversight"
)

// TestOversightChannelsAndExecution: GET /v1/oversight says which channel
// decided each request (the deciding vote's via, or timeout) and how long
// it took, and what became of the approved calls: claimed with a reported
// outcome, or claimed and never reported.
func TestOversightChannelsAndExecution(t *testing.T) {
	o := setupOversight(t)
	r1 := o.propose(t, "acme", "run-1", "billing.refund", `{"amount":20}`)
	r2 := o.propose(t, "acme", "run-2", "billing.refund", `{"amount":30}`)
	r3 := o.propose(t, "acme", "run-3", "billing.refund", `{"amount":40}`)
	r4 := o.propose(t, "acme", "run-4", "billing.refund", `{"amount":50}`)
	o.advance(t, 5*time.Second)
	if r := o.call(t, "POST", "/v1/approvals/"+r1+"/votes", "alice", `{"decision":"approve","via":"cli"}`); r.status != http.StatusOK {
		t.Fatalf("alice via cli: %d %s", r.status, r.body)
	}
	o.advance(t, 10*time.Second)
	o.vote(t, "bob", r2, contracts.DecisionApprove)
	o.advance(t, 15*time.Second)
	o.vote(t, "bob", r3, contracts.DecisionApprove)
	o.vote(t, "alice", r4, contracts.DecisionReject)

	for i, id := range []string{r1, r2, r3} {
		if r := o.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", map[string]any{"claim_id": "claim-" + id}); r.status != http.StatusOK {
			t.Fatalf("claim %d: %d %s", i, r.status, r.body)
		}
	}
	for id, status := range map[string]string{r1: contracts.ExecutionSucceeded, r2: contracts.ExecutionFailed} {
		report := map[string]any{"command_id": "report-" + id, "status": status}
		if r := o.call(t, "POST", "/v1/approvals/"+id+"/outcome", "agent", report); r.status != http.StatusOK {
			t.Fatalf("outcome %s: %d %s", status, r.status, r.body)
		}
	}

	rep := o.report(t, "admin", "")
	want := []oversight.ChannelStats{
		{Channel: "api", Decided: 3, TimeToDecision: oversight.Spread{Min: 15, P25: 22.5, Median: 30, P75: 30, P90: 30, Max: 30}},
		{Channel: "cli", Decided: 1, TimeToDecision: oversight.Spread{Min: 5, P25: 5, Median: 5, P75: 5, P90: 5, Max: 5}},
	}
	if !reflect.DeepEqual(rep.Channels, want) {
		t.Errorf("channels %+v\nwant %+v", rep.Channels, want)
	}
	wantExec := oversight.ExecutionStats{
		ExecutionCounts: oversight.ExecutionCounts{Approved: 3, Claimed: 3, Succeeded: 1, Failed: 1, NotReported: 1},
		Rules: []oversight.RuleExecution{{Rule: "refunds",
			ExecutionCounts: oversight.ExecutionCounts{Approved: 3, Claimed: 3, Succeeded: 1, Failed: 1, NotReported: 1}}},
	}
	if !reflect.DeepEqual(rep.Execution, wantExec) {
		t.Errorf("execution %+v\nwant %+v", rep.Execution, wantExec)
	}
}
