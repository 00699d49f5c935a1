package approval_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// benchRecord is a pending record as the arbiter keeps it for a typical
// gated tool call: a snapshot with about 300 bytes of arguments and three
// possible approvers, quorum k.
func benchRecord(b *testing.B, k int) contracts.Record {
	b.Helper()
	args := json.RawMessage(`{"recipient":"ACME GmbH","iban":"DE89370400440532013000",` +
		`"bic":"COBADEFFXXX","amount":1250.75,"currency":"EUR","reference":"INV-2025-00042",` +
		`"memo":"Quarterly licence renewal for the analytics platform, budget line 7.3",` +
		`"tags":["finance","recurring","q3"],"execute_at":"2025-07-01T09:00:00Z","dry_run":false}`)
	canon, err := contracts.Canonicalize(args)
	if err != nil {
		b.Fatal(err)
	}
	sha, err := contracts.ArgumentsSHA256(canon)
	if err != nil {
		b.Fatal(err)
	}
	created := time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC)
	req := contracts.ApprovalRequested{
		Spec:    contracts.SpecApprovalRequested,
		EventID: "0b6c1d52-6a43-5c36-9a8e-2f1f1e0c3b7d",
		Kind:    contracts.KindToolApproval,
		Run: contracts.Run{
			ID: "run-42", Agent: "billing-bot", RequestedBy: "agent:billing", Owner: "team-finance", Tenant: "acme",
		},
		ToolCall: &contracts.ToolCall{ID: "call-1", Name: "payments.send", Arguments: canon, ArgumentsSHA256: sha},
		Risk:     contracts.RiskHigh,
		Summary:  "Pay 1250.75 EUR to ACME GmbH",
		Policy:   contracts.PolicyRef{Rule: "payments", Version: "v7"},
		Quorum: contracts.Quorum{
			Required: k, Approvers: []string{"alice", "bob", "carol"}, Veto: true, Order: contracts.OrderAny,
		},
		Escalation:       []contracts.EscalationTier{},
		Reminders:        []string{},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit},
		Channels:         []string{"slack", "email"},
		ExpiresAt:        created.Add(24 * time.Hour),
		OnTimeout:        contracts.OnTimeoutReject,
		CreatedAt:        created,
	}
	return approval.NewRecord(req, created)
}

func benchVote(rec contracts.Record, approver string) contracts.Vote {
	return contracts.Vote{
		Spec: contracts.SpecVote, VoteID: "vote-" + approver, EventID: rec.Request.EventID,
		Decision: contracts.DecisionApprove, Approver: contracts.Approver{ID: approver, Via: contracts.ViaSlack},
		ArgumentsSHA256: rec.Request.ToolCall.ArgumentsSHA256, DecidedAt: rec.Request.CreatedAt.Add(time.Minute),
	}
}

// BenchmarkApplyVote applies the approval that decides a pending record (quorum 1).
func BenchmarkApplyVote(b *testing.B) {
	rec := benchRecord(b, 1)
	v := benchVote(rec, "alice")
	now := v.DecidedAt
	b.ReportAllocs()
	for b.Loop() {
		if res := approval.ApplyVote(rec, v, now); !res.Decided {
			b.Fatalf("not decided: %+v", res)
		}
	}
}

// BenchmarkApplyVoteCounted applies the second of three required approvals:
// counted, still pending.
func BenchmarkApplyVoteCounted(b *testing.B) {
	rec := benchRecord(b, 3)
	first := approval.ApplyVote(rec, benchVote(rec, "alice"), rec.Request.CreatedAt.Add(time.Minute))
	if !first.Changed || first.Decided {
		b.Fatalf("first vote: %+v", first)
	}
	rec = first.Record
	v := benchVote(rec, "bob")
	now := v.DecidedAt
	b.ReportAllocs()
	for b.Loop() {
		if res := approval.ApplyVote(rec, v, now); !res.Changed || res.Decided {
			b.Fatalf("second vote: %+v", res)
		}
	}
}
