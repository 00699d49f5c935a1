package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
)

// TestReviewOfAForgedRequestIsRefused: a request published on the bus
// with the orchestrator's credential, asking for no approvers and approval
// by timeout, is refused by the arbiter; an agent reviewing that call over
// HTTP gets denied with code request_refused, not an approval, and the
// record says why.
func TestReviewOfAForgedRequestIsRefused(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	run := contracts.Run{ID: "run-forged", Agent: "billing-bot"}
	args := json.RawMessage(`{"amount":99999,"currency":"EUR"}`)
	sum, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: orchestrator.EventID(run, "c1"), Kind: contracts.KindToolApproval,
		Run: run, ToolCall: &contracts.ToolCall{ID: "c1", Name: "payments.send", Arguments: args, ArgumentsSHA256: sum},
		Policy: contracts.PolicyRef{Rule: "none", Version: "x"}, Quorum: contracts.Quorum{Approvers: []string{}},
		Escalation: []contracts.EscalationTier{}, Reminders: []string{}, AllowedDecisions: []string{}, Channels: []string{},
		ExpiresAt: now.Add(2 * time.Second), OnTimeout: contracts.OnTimeoutApprove, CreatedAt: now,
	}
	if _, err := events.Publish(ctx, e.srv.JetStreamAs(embedded.RoleOrchestrator), contracts.ToolRequestedSubject(run.Agent), req, req.EventID, nil); err != nil {
		t.Fatal(err)
	}

	res := e.review(t, "?wait=30s", run, toolCall{ID: "c1", Name: "payments.send", Arguments: args})
	if res[0].Verdict != orchestrator.VerdictDenied || res[0].Code != "request_refused" || res[0].EventID != req.EventID {
		t.Fatalf("review of the forged call: %+v, want denied with code request_refused", res[0])
	}
	r := e.call(t, "GET", "/v1/approvals/"+req.EventID+"?wait=10s", "alice", nil)
	if r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	var rec recordAnswer
	r.decode(t, &rec)
	if rec.Record.Status != contracts.StatusRejected || rec.Record.Outcome == nil ||
		rec.Record.Outcome.Reason != "request_refused:unknown_policy_version" {
		t.Fatalf("record: status %s outcome %+v, want rejected, request_refused:unknown_policy_version", rec.Record.Status, rec.Record.Outcome)
	}
}
