package orchestrator_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/countersigntest"
)

const payrollPolicy = `
version: payroll-1
rules:
  - name: payroll
    tools: [payroll.pay]
    action: require_approval
    approvers: [fay]
    summary: "Pay {{args.name}} (SSN {{args.ssn}})"
    sensitive: [/ssn, "/card/*"]
`

// TestGateListsSensitiveValues: the request snapshot lists, as concrete
// pointers, the values the rule names and the tool schema marks; its
// summary masks them; its arguments and hash are the real ones. The
// arbiter accepts it, and refuses a copy that lists fewer.
func TestGateListsSensitiveValues(t *testing.T) {
	e := setupIntegrity(t)
	ctx := context.Background()
	if _, err := orchestrator.ApplyPolicy(ctx, e.srv.JetStreamAs(embedded.RoleAPI), []byte(payrollPolicy), "admin", time.Now()); err != nil {
		t.Fatal(err)
	}
	gate := e.gateOn(t, countersigntest.Policy(t, payrollPolicy))
	r := contracts.Run{ID: "run-s", Agent: "payroll-bot", RequestedBy: "erin"}
	args := json.RawMessage(`{"name":"Ann","ssn":"123-45-6789","card":{"number":"4111111111111111","exp":"12/30"},"pin":"0000"}`)
	schema := json.RawMessage(`{"type":"object","properties":{"pin":{"type":"string","writeOnly":true}}}`)
	vs, err := gate.Submit(ctx, r, []orchestrator.ToolCall{{ID: "c1", Name: "payroll.pay", Arguments: args, Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	rec := e.waitRecord(t, vs[0].EventID, pending)
	req := rec.Request
	if want := []string{"/card/exp", "/card/number", "/pin", "/ssn"}; !slices.Equal(req.Sensitive, want) {
		t.Errorf("sensitive = %q, want %q", req.Sensitive, want)
	}
	if req.Summary != "Pay Ann (SSN "+approval.Mask+")" {
		t.Errorf("summary %q, want the SSN masked", req.Summary)
	}
	sha, _ := contracts.ArgumentsSHA256(args)
	if req.ToolCall.ArgumentsSHA256 != sha || !strings.Contains(string(req.ToolCall.Arguments), "123-45-6789") {
		t.Errorf("the snapshot's arguments are not the real ones: %s %s", req.ToolCall.Arguments, req.ToolCall.ArgumentsSHA256)
	}

	// The same request from someone who leaves the SSN out of sensitive.
	forgedReq := req
	forgedReq.ToolCall = &contracts.ToolCall{ID: "c2", Name: "payroll.pay", Arguments: args, ArgumentsSHA256: sha}
	forgedReq.EventID = orchestrator.EventID(r, "c2")
	forgedReq.Sensitive = []string{"/card/exp", "/card/number", "/pin"}
	forgedReq.CreatedAt = time.Now().UTC()
	forgedReq.ExpiresAt = forgedReq.CreatedAt.Add(time.Hour)
	if _, err := events.Publish(ctx, e.srv.JetStreamAs(embedded.RoleOrchestrator), contracts.ToolRequestedSubject(r.Agent),
		forgedReq, forgedReq.EventID, nil); err != nil {
		t.Fatal(err)
	}
	refused := e.waitRecord(t, forgedReq.EventID, func(*contracts.Record) bool { return true })
	if refused.Status != contracts.StatusRejected || refused.Outcome == nil ||
		refused.Outcome.Reason != contracts.ReasonRequestRefused+":"+contracts.RefusalWeakerThanPolicy ||
		!strings.Contains(refused.Outcome.Comment, `"/ssn"`) {
		t.Fatalf("a request hiding less than the rule: status %s outcome %+v, want refused as weaker than the policy", refused.Status, refused.Outcome)
	}
}
