package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/countersign/countersign/contracts"
)

// TestOutcomeOnceFromTheClaimant: only whoever claimed reports how the call
// ended, once; a retry with the same command id is the same report.
func TestOutcomeOnceFromTheClaimant(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-outcome", "payments.send")
	report := map[string]any{"command_id": "report-1", "status": "succeeded", "summary": "paid 5 EUR"}

	e.call(t, "POST", "/v1/approvals/"+id+"/outcome", "agent", report).wantError(t, http.StatusConflict, contracts.ReasonNotClaimed, "")
	e.approve(t, "alice", id)
	if r := e.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", map[string]any{"claim_id": "claim-1"}); r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		name, token string
		body        map[string]any
		status      int
		code, field string
	}{
		{"an unknown status", "agent", map[string]any{"status": "done"}, 400, "invalid_field", "status"},
		{"a result hash that is not one", "agent", map[string]any{"status": "failed", "result_sha256": "abc"}, 400, "invalid_field", "result_sha256"},
		{"an admin, who did not claim", "admin", report, 403, contracts.ReasonNotPermitted, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call(t, "POST", "/v1/approvals/"+id+"/outcome", c.token, c.body).wantError(t, c.status, c.code, c.field)
		})
	}
	r := e.call(t, "POST", "/v1/approvals/"+id+"/outcome", "agent", report)
	var ans recordAnswer
	r.decode(t, &ans)
	x := ans.Record.Execution
	if r.status != http.StatusOK || x == nil || x.Status != contracts.ExecutionSucceeded || x.Summary != "paid 5 EUR" || x.ReportedBy != "agent:billing" {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	if r := e.call(t, "POST", "/v1/approvals/"+id+"/outcome", "agent", report); r.status != http.StatusOK {
		t.Fatalf("the same report again: %d %s", r.status, r.body)
	}
	report["command_id"], report["status"] = "report-2", "failed"
	e.call(t, "POST", "/v1/approvals/"+id+"/outcome", "agent", report).wantError(t, http.StatusConflict, contracts.ReasonOutcomeReported, "")
	// The timeline tells it.
	tl := e.call(t, "GET", "/v1/approvals/"+id+"/events", "admin", nil)
	if tl.status != http.StatusOK || !bytes.Contains(tl.body, []byte(`"outcome"`)) {
		t.Fatalf("timeline: %d %s", tl.status, tl.body)
	}
}
