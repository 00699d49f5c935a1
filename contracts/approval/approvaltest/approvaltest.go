// Package approvaltest builds requests, votes, commands and records for
// tests of the rules of an approval (package approval) and of whatever
// applies them: one pending tool approval, quorum 1 of alice, bob and
// carol, and options that change it.
package approvaltest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// T0 is when Request's request was created.
var T0 = time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC)

// At is a moment m minutes after the request was created.
func At(m int) time.Time { return T0.Add(time.Duration(m) * time.Minute) }

// The request's event id and arguments, and an edit of them.
const (
	EventID       = "312783e4-11a0-5e21-b755-806afd756c7e"
	RequestedArgs = `{"amount":100,"currency":"eur","meta":{"ticket":"T-1"},"reason":"duplicate"}`
	EditedArgs    = `{"amount":80,"currency":"eur","meta":{"ticket":"T-1","note":"partial"}}`
)

// Hash is the arguments hash of args.
func Hash(t testing.TB, args string) string {
	t.Helper()
	sum, err := contracts.ArgumentsSHA256([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// Request is a pending tool approval: quorum 1 of alice, bob and carol,
// asked for by erin on behalf of frank's agent.
func Request(t testing.TB, opts ...func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
	t.Helper()
	req := contracts.ApprovalRequested{
		Spec:    contracts.SpecApprovalRequested,
		EventID: EventID,
		Kind:    contracts.KindToolApproval,
		Run: contracts.Run{
			ID: "run-1", Agent: "billing", RequestedBy: "erin", Owner: "frank", Tenant: "acme",
		},
		ToolCall: &contracts.ToolCall{
			ID: "call-1", Name: "stripe.refund",
			Arguments:       json.RawMessage(RequestedArgs),
			ArgumentsSHA256: Hash(t, RequestedArgs),
		},
		Risk:    contracts.RiskHigh,
		Summary: "billing wants to call stripe.refund",
		Policy:  contracts.PolicyRef{Rule: "refunds", Version: "v1"},
		Quorum: contracts.Quorum{
			Required: 1, Approvers: []string{"alice", "bob", "carol"}, Veto: true, Order: contracts.OrderAny,
		},
		Escalation: []contracts.EscalationTier{},
		Reminders:  []string{},
		AllowedDecisions: []string{
			contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond,
		},
		Channels:  []string{"web"},
		ExpiresAt: T0.Add(24 * time.Hour),
		OnTimeout: contracts.OnTimeoutReject,
		CreatedAt: T0,
	}
	for _, o := range opts {
		o(&req)
	}
	return req
}

// Quorum requires k approvals.
func Quorum(k int) func(*contracts.ApprovalRequested) {
	return func(r *contracts.ApprovalRequested) { r.Quorum.Required = k }
}

// NoVeto lets a rejection not veto.
func NoVeto(r *contracts.ApprovalRequested) { r.Quorum.Veto = false }

// AnyApprover lets anyone approve.
func AnyApprover(r *contracts.ApprovalRequested) { r.Quorum.Approvers = []string{} }

// AllowSelf lets the requester and owner approve.
func AllowSelf(r *contracts.ApprovalRequested) { r.Quorum.AllowSelfApproval = true }

// OnTimeoutApprove lets time approve.
func OnTimeoutApprove(r *contracts.ApprovalRequested) { r.OnTimeout = contracts.OnTimeoutApprove }

// HumanInput makes the request a question.
func HumanInput(r *contracts.ApprovalRequested) {
	r.Spec = contracts.SpecHumanInputRequested
	r.Kind = contracts.KindHumanInput
	r.ToolCall = nil
	r.Question = &contracts.Question{Text: "Which cost centre?", Schema: json.RawMessage(`{"type":"object"}`)}
	r.AllowedDecisions = []string{contracts.DecisionAnswer}
}

// Vote is a vote on Request's approval.
func Vote(id, approver, decision string, opts ...func(*contracts.Vote)) contracts.Vote {
	v := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: id, EventID: EventID, Decision: decision,
		Approver:  contracts.Approver{ID: approver, Via: contracts.ViaWeb},
		DecidedAt: T0,
	}
	for _, o := range opts {
		o(&v)
	}
	return v
}

// Comment sets a vote's comment.
func Comment(c string) func(*contracts.Vote) { return func(v *contracts.Vote) { v.Comment = c } }

// Saw sets the arguments hash the approver saw.
func Saw(sha string) func(*contracts.Vote) {
	return func(v *contracts.Vote) { v.ArgumentsSHA256 = sha }
}

// Args sets an edit's arguments.
func Args(raw string) func(*contracts.Vote) {
	return func(v *contracts.Vote) { v.Arguments = json.RawMessage(raw) }
}

// Record is the pending record of req after votes were counted, one per
// minute; each must count.
func Record(t testing.TB, req contracts.ApprovalRequested, votes ...contracts.Vote) contracts.Record {
	t.Helper()
	rec := approval.NewRecord(req, T0)
	for i, v := range votes {
		res := approval.ApplyVote(rec, v, At(i+1))
		if !res.Changed || res.Refusal != "" || res.Duplicate {
			t.Fatalf("setting up: vote %s was not counted: %+v", v.VoteID, res)
		}
		rec = res.Record
	}
	return rec
}

// Command is a command on Request's approval.
func Command(id, cmd, by string, opts ...func(*contracts.Command)) contracts.Command {
	c := contracts.Command{Spec: contracts.SpecCommand, CommandID: id, EventID: EventID, Command: cmd, By: by}
	for _, o := range opts {
		o(&c)
	}
	return c
}
