package approval_test

import (
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/approval/approvaltest"
)

// reviewed is a pending record of at.Request (risk high) whose rule names
// reviewer triage with approve_below 20 up to risk high and reject_above 90.
func reviewed(t *testing.T, opts ...func(*contracts.ApprovalRequested)) contracts.Record {
	t.Helper()
	rec := approvaltest.Record(t, approvaltest.Request(t, opts...))
	ninety := 90
	rec.Review = &contracts.Review{Reviewer: "triage", ApproveBelow: 20, UpToRisk: contracts.RiskHigh, RejectAbove: &ninety, Timeout: "10s"}
	return rec
}

func opinion(t *testing.T, score int, sha string) contracts.Opinion {
	t.Helper()
	if sha == "" {
		sha = approvaltest.Hash(t, approvaltest.RequestedArgs)
	}
	return contracts.Opinion{
		Spec: contracts.SpecOpinion, EventID: approvaltest.EventID, Reviewer: "triage", Score: &score,
		Explanation: "a refund within policy", ArgumentsSHA256: sha, At: approvaltest.At(1),
	}
}

func failed(why string) contracts.Opinion {
	return contracts.Opinion{Spec: contracts.SpecOpinion, EventID: approvaltest.EventID, Reviewer: "triage", Error: why, At: approvaltest.At(1)}
}

// TestOpinionDecidesOnlyWhereTheRuleLetsIt: a low score approves, as the
// reviewer's vote, only within up_to_risk, without step-up or ordered
// approvers, for the arguments under review; a high score rejects only
// with reject_above; an error, a middling score or anything else is
// advice and the record stays pending.
func TestOpinionDecidesOnlyWhereTheRuleLetsIt(t *testing.T) {
	critical := func(r *contracts.ApprovalRequested) { r.Risk = contracts.RiskCritical }
	stepUp := func(r *contracts.ApprovalRequested) { r.StepUp = contracts.StepUpPasskey }
	sequence := func(r *contracts.ApprovalRequested) { r.Quorum.Order = contracts.OrderSequence }
	rejectOnly := func(r *contracts.ApprovalRequested) { r.AllowedDecisions = []string{contracts.DecisionReject} }
	for _, c := range []struct {
		name       string
		rec        contracts.Record
		op         contracts.Opinion
		status     string
		effect     string
		decidedBy  string
		votesAfter int
	}{
		{"low score approves", reviewed(t), opinion(t, 5, ""), contracts.StatusApproved, contracts.EffectApproved, "reviewer:triage", 1},
		{"at the threshold is advice", reviewed(t), opinion(t, 20, ""), contracts.StatusPending, contracts.EffectAdvice, "", 0},
		{"risk above up_to_risk", reviewed(t, critical), opinion(t, 5, ""), contracts.StatusPending, contracts.EffectAdvice, "", 0},
		{"step-up rule", reviewed(t, stepUp), opinion(t, 5, ""), contracts.StatusPending, contracts.EffectAdvice, "", 0},
		{"ordered approvers", reviewed(t, sequence), opinion(t, 5, ""), contracts.StatusPending, contracts.EffectAdvice, "", 0},
		{"approve not allowed", reviewed(t, rejectOnly), opinion(t, 5, ""), contracts.StatusPending, contracts.EffectAdvice, "", 0},
		{"other arguments", reviewed(t), opinion(t, 5, approvaltest.Hash(t, approvaltest.EditedArgs)), contracts.StatusPending, contracts.EffectAdvice, "", 0},
		{"an error", reviewed(t), failed("timeout after 10s"), contracts.StatusPending, contracts.EffectAdvice, "", 0},
		{"high score rejects", reviewed(t), opinion(t, 95, ""), contracts.StatusRejected, contracts.EffectRejected, "reviewer:triage", 1},
		{"quorum 2 counts one", reviewed(t, approvaltest.Quorum(2)), opinion(t, 5, ""), contracts.StatusPending, contracts.EffectApproved, "", 1},
		{"no reject without veto", reviewed(t, approvaltest.NoVeto), opinion(t, 95, ""), contracts.StatusPending, contracts.EffectRejected, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := approval.ApplyOpinion(c.rec, c.op, approvaltest.At(2))
			if !res.Changed || res.Refusal != "" {
				t.Fatalf("result %+v", res)
			}
			rec := res.Record
			if rec.Status != c.status || rec.Review.Effect != c.effect || len(rec.Votes) != c.votesAfter {
				t.Fatalf("status %s effect %s votes %d, want %s %s %d", rec.Status, rec.Review.Effect, len(rec.Votes), c.status, c.effect, c.votesAfter)
			}
			if rec.Review.Opinion == nil || rec.Review.Opinion.Explanation != c.op.Explanation {
				t.Fatalf("opinion not recorded: %+v", rec.Review)
			}
			if c.rec.Review.Opinion != nil || len(c.rec.Votes) != 0 {
				t.Fatal("the record applied to was changed")
			}
			if res.Decided != (c.decidedBy != "") {
				t.Fatalf("decided %v", res.Decided)
			}
			if c.decidedBy != "" && (len(rec.Outcome.DecidedBy) != 1 || rec.Outcome.DecidedBy[0] != c.decidedBy) {
				t.Fatalf("decided by %v", rec.Outcome.DecidedBy)
			}
			if c.votesAfter == 1 && (rec.Votes[0].Approver.Via != contracts.ViaReviewer || rec.Votes[0].Approver.ID != "reviewer:triage") {
				t.Fatalf("vote %+v", rec.Votes[0])
			}
		})
	}
}

func TestOpinionAfterPeopleIsKeptAndChangesNothingElse(t *testing.T) {
	rec := reviewed(t)
	rec = approval.ApplyVote(rec, approvaltest.Vote("v1", "alice", contracts.DecisionReject), approvaltest.At(1)).Record
	res := approval.ApplyOpinion(rec, opinion(t, 5, ""), approvaltest.At(2))
	if !res.Changed || res.Decided || res.Record.Status != contracts.StatusRejected || len(res.Record.Votes) != 1 {
		t.Fatalf("result %+v", res)
	}
	if res.Record.Review.Opinion == nil || res.Record.Review.Effect != contracts.EffectAdvice {
		t.Fatalf("review %+v", res.Record.Review)
	}
	if again := approval.ApplyOpinion(res.Record, opinion(t, 3, ""), approvaltest.At(3)); !again.Duplicate || again.Changed {
		t.Fatalf("a second opinion: %+v", again)
	}
}

func TestOpinionWithoutItsReviewerIsRefused(t *testing.T) {
	plain := approvaltest.Record(t, approvaltest.Request(t))
	if res := approval.ApplyOpinion(plain, opinion(t, 5, ""), approvaltest.At(2)); res.Changed || res.Refusal != contracts.ReasonNotAnApprover {
		t.Fatalf("an opinion on a record without a reviewer: %+v", res)
	}
	other := opinion(t, 5, "")
	other.Reviewer = "audit"
	if res := approval.ApplyOpinion(reviewed(t), other, approvaltest.At(2)); res.Changed || res.Refusal != contracts.ReasonNotAnApprover {
		t.Fatalf("another reviewer's opinion: %+v", res)
	}
}

func TestCheckOpinion(t *testing.T) {
	good := opinion(t, 5, "")
	if err := approval.CheckOpinion(&good); err != nil {
		t.Fatal(err)
	}
	bad := []func(*contracts.Opinion){
		func(o *contracts.Opinion) { o.Spec = "x" },
		func(o *contracts.Opinion) { o.EventID = "../" },
		func(o *contracts.Opinion) { o.Reviewer = "" },
		func(o *contracts.Opinion) { n := 101; o.Score = &n },
		func(o *contracts.Opinion) { n := -1; o.Score = &n },
		func(o *contracts.Opinion) { o.Error = "both" },
		func(o *contracts.Opinion) { o.Score = nil },
		func(o *contracts.Opinion) { o.Explanation = string(make([]byte, contracts.MaxExplanationBytes+1)) },
	}
	for i, f := range bad {
		o := opinion(t, 5, "")
		f(&o)
		if err := approval.CheckOpinion(&o); err == nil {
			t.Errorf("case %d: %+v accepted", i, o)
		}
	}
}
