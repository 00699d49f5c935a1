package approval_test

import (
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// sequence makes the request an ordered chain: alice, then bob, then carol.
func sequence(r *contracts.ApprovalRequested) { r.Quorum.Order = contracts.OrderSequence }

func TestOrderedChain(t *testing.T) {
	later := t0.Add(time.Hour)
	t.Run("an approval out of turn is refused", func(t *testing.T) {
		rec := record(t, request(t, quorum(2), sequence))
		res := approval.ApplyVote(rec, vote("v1", "bob", contracts.DecisionApprove), later)
		if res.Refusal != contracts.ReasonOutOfOrder || res.Record.Status != contracts.StatusPending {
			t.Fatalf("bob first: refusal %q status %s, want out_of_order and pending", res.Refusal, res.Record.Status)
		}
	})
	t.Run("in turn the chain decides", func(t *testing.T) {
		rec := record(t, request(t, quorum(2), sequence), vote("v1", "alice", contracts.DecisionApprove))
		if rec.Status != contracts.StatusPending {
			t.Fatalf("after alice: %s, want pending", rec.Status)
		}
		if res := approval.ApplyVote(rec, vote("v2", "carol", contracts.DecisionApprove), later); res.Refusal != contracts.ReasonOutOfOrder {
			t.Fatalf("carol before bob: refusal %q, want out_of_order", res.Refusal)
		}
		res := approval.ApplyVote(rec, vote("v3", "bob", contracts.DecisionApprove), later)
		if res.Refusal != "" || res.Record.Status != contracts.StatusApproved {
			t.Fatalf("bob second: refusal %q status %s, want approved", res.Refusal, res.Record.Status)
		}
		if got := res.Record.Outcome.DecidedBy; len(got) != 2 || got[0] != "alice" || got[1] != "bob" {
			t.Fatalf("decided_by %v, want [alice bob]", got)
		}
	})
	t.Run("anyone in the chain may reject at any time", func(t *testing.T) {
		rec := record(t, request(t, quorum(2), sequence))
		res := approval.ApplyVote(rec, vote("v1", "carol", contracts.DecisionReject), later)
		if res.Refusal != "" || res.Record.Status != contracts.StatusRejected {
			t.Fatalf("carol rejects first: refusal %q status %s, want rejected", res.Refusal, res.Record.Status)
		}
	})
	t.Run("the requester in the chain is skipped", func(t *testing.T) {
		rec := record(t, request(t, quorum(2), sequence, func(r *contracts.ApprovalRequested) { r.Run.RequestedBy = "alice" }))
		res := approval.ApplyVote(rec, vote("v1", "bob", contracts.DecisionApprove), later)
		if res.Refusal != "" {
			t.Fatalf("bob first when alice requested: refusal %q, want counted", res.Refusal)
		}
	})
	t.Run("order any accepts any order", func(t *testing.T) {
		rec := record(t, request(t, quorum(2)))
		if res := approval.ApplyVote(rec, vote("v1", "carol", contracts.DecisionApprove), later); res.Refusal != "" {
			t.Fatalf("carol first without a sequence: refusal %q", res.Refusal)
		}
	})
}

func TestRejectWithoutVetoDecidesWhenApprovalIsImpossible(t *testing.T) {
	// Quorum 2 of alice, bob, carol without veto, requested by alice: once bob
	// rejects, only carol can still approve, so 2 can never be reached.
	rec := record(t, request(t, quorum(2), func(r *contracts.ApprovalRequested) {
		r.Quorum.Veto = false
		r.Run.RequestedBy = "alice"
	}))
	res := approval.ApplyVote(rec, vote("v1", "bob", contracts.DecisionReject), t0.Add(time.Minute))
	if res.Record.Status != contracts.StatusRejected {
		t.Fatalf("status %s, want rejected: the requester cannot approve, so quorum is out of reach", res.Record.Status)
	}
}
