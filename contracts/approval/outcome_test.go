package approval_test

import (
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// TestOutcomeOnceFromTheClaimant: an outcome is recorded once, after a
// claim, from whoever claimed; a retry with its command id is a duplicate.
func TestOutcomeOnceFromTheClaimant(t *testing.T) {
	approved := record(t, request(t), vote("v1", "alice", contracts.DecisionApprove))
	outcome := func(id, by, status string) contracts.Command {
		return command(id, contracts.CommandOutcome, by, func(c *contracts.Command) { c.Status, c.Summary = status, "done" })
	}
	if res := approval.ApplyCommand(approved, outcome("o1", "billing", contracts.ExecutionSucceeded), at(12)); res.Refusal != contracts.ReasonNotClaimed || res.Changed {
		t.Fatalf("an outcome before a claim: %+v", res)
	}
	claimed := approval.ApplyCommand(approved, command("c1", contracts.CommandClaim, "billing",
		func(c *contracts.Command) { c.ClaimID = "claim-1" }), at(13)).Record
	if claimed.Claim == nil || claimed.Claim.By != "billing" {
		t.Fatalf("the claim does not name its claimant: %+v", claimed.Claim)
	}
	if res := approval.ApplyCommand(claimed, outcome("o1", "alice", contracts.ExecutionSucceeded), at(14)); res.Refusal != contracts.ReasonNotPermitted {
		t.Fatalf("an outcome from someone who did not claim: %+v", res)
	}
	res := approval.ApplyCommand(claimed, outcome("o1", "billing", contracts.ExecutionFailed), at(14))
	x := res.Record.Execution
	if !res.Changed || res.Refusal != "" || x == nil || x.Status != contracts.ExecutionFailed || x.ReportedBy != "billing" || x.CommandID != "o1" || !x.ReportedAt.Equal(at(14)) {
		t.Fatalf("the claimant's outcome: %+v %+v", res, x)
	}
	if res.Record.Status != contracts.StatusApproved || res.Decided {
		t.Fatalf("an outcome changed the decision: %s", res.Record.Status)
	}
	reported := res.Record
	if res := approval.ApplyCommand(reported, outcome("o1", "billing", contracts.ExecutionFailed), at(15)); !res.Duplicate {
		t.Fatalf("the same report again: %+v", res)
	}
	if res := approval.ApplyCommand(reported, outcome("o2", "billing", contracts.ExecutionSucceeded), at(15)); res.Refusal != contracts.ReasonOutcomeReported || res.Changed {
		t.Fatalf("a second report: %+v", res)
	}
}
