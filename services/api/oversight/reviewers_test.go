package oversight_test

import (
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api/oversight"
)

// TestReviewerAgreementWithPeople: per reviewer, the opinions and errors,
// the calls it decided itself, and how often its score sided with what
// people decided (below the threshold: approve).
func TestReviewerAgreementWithPeople(t *testing.T) {
	at := time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC)
	score := func(n int) *int { return &n }
	req := func(status string, rv *oversight.Review) oversight.Request {
		return oversight.Request{EventID: "e", Rule: "r", Risk: contracts.RiskLow, CreatedAt: at, Status: status, Review: rv}
	}
	reqs := []oversight.Request{
		// Decided by the reviewer itself.
		req(contracts.StatusApproved, &oversight.Review{Reviewer: "triage", ApproveBelow: 20, Score: score(5), Given: true, Effect: contracts.EffectApproved}),
		// Advice people agreed with: low and approved, high and rejected.
		req(contracts.StatusApproved, &oversight.Review{Reviewer: "triage", ApproveBelow: 20, Score: score(10), Given: true, Effect: contracts.EffectAdvice}),
		req(contracts.StatusRejected, &oversight.Review{Reviewer: "triage", ApproveBelow: 20, Score: score(20), Given: true, Effect: contracts.EffectAdvice}),
		// Advice people overruled: 30 is below the default threshold 50.
		req(contracts.StatusRejected, &oversight.Review{Reviewer: "audit", Score: score(30), Given: true, Effect: contracts.EffectAdvice}),
		// Still pending: not compared.
		req(contracts.StatusPending, &oversight.Review{Reviewer: "triage", Score: score(90), Given: true, Effect: contracts.EffectAdvice}),
		// Failed: an error, left to people.
		req(contracts.StatusApproved, &oversight.Review{Reviewer: "triage", Given: true, Effect: contracts.EffectAdvice}),
		// Not asked yet, and no reviewer at all.
		req(contracts.StatusPending, &oversight.Review{Reviewer: "triage"}),
		req(contracts.StatusApproved, nil),
	}
	rep := oversight.Compute(reqs, oversight.Options{Since: at.Add(-time.Hour)})
	if len(rep.Reviewers) != 2 {
		t.Fatalf("reviewers %+v", rep.Reviewers)
	}
	tr, au := rep.Reviewers[0], rep.Reviewers[1]
	if tr.Reviewer != "triage" || tr.Opinions != 4 || tr.Errors != 1 || tr.AutoApproved != 1 || tr.Compared != 2 || tr.Agreed != 2 || *tr.Agreement != 1 {
		t.Errorf("triage %+v", tr)
	}
	if au.Reviewer != "audit" || au.Opinions != 1 || au.Compared != 1 || au.Agreed != 0 || *au.Agreement != 0 {
		t.Errorf("audit %+v", au)
	}
	if empty := oversight.Compute(nil, oversight.Options{}); empty.Reviewers == nil {
		t.Error("no reviewers is an empty list, not null")
	}
}
