package policy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/orchestrator/policy"
)

const reviewerPolicy = `
version: "r1"
default_rule:
  reviewer: {endpoint: triage}
risk_defaults:
  low:
    reviewer: {endpoint: triage, approve_below: 30, up_to_risk: low}
rules:
  - name: refunds
    tools: ["stripe.refund"]
    action: require_approval
    risk: medium
    reviewer: {endpoint: triage, approve_below: 20, up_to_risk: medium, reject_above: 90, timeout: 5s}
  - name: lookups
    tools: ["crm.lookup"]
    action: require_approval
    risk: low
  - name: deploys
    tools: ["deploy"]
    action: require_approval
`

func TestReviewerComesFromTheRuleItsRiskTierOrDefaultRule(t *testing.T) {
	p := mustParse(t, reviewerPolicy)
	ninety := 90
	for tool, want := range map[string]policy.Reviewer{
		"stripe.refund": {Endpoint: "triage", ApproveBelow: 20, UpToRisk: "medium", RejectAbove: &ninety, Timeout: 5 * time.Second},
		"crm.lookup":    {Endpoint: "triage", ApproveBelow: 30, UpToRisk: "low", Timeout: policy.DefaultReviewerTimeout},
		"deploy":        {Endpoint: "triage", Timeout: policy.DefaultReviewerTimeout},
		"other":         {Endpoint: "triage", Timeout: policy.DefaultReviewerTimeout},
	} {
		d := p.Evaluate(call("bot", tool))
		if d.Reviewer == nil {
			t.Fatalf("%s: no reviewer", tool)
		}
		got, exp := *d.Reviewer, want
		gotReject, expReject := deref(got.RejectAbove), deref(exp.RejectAbove)
		got.RejectAbove, exp.RejectAbove = nil, nil
		if got != exp || gotReject != expReject {
			t.Errorf("%s: reviewer %+v (reject above %v), want %+v (%v)", tool, got, gotReject, exp, expReject)
		}
	}
	rv := p.Evaluate(call("bot", "stripe.refund")).Reviewer.Review()
	if rv.Reviewer != "triage" || rv.ApproveBelow != 20 || rv.UpToRisk != "medium" || *rv.RejectAbove != 90 || rv.Timeout != "5s" {
		t.Fatalf("the record's form: %+v", rv)
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestReviewerProblemsNameTheirLine: each mistake in a reviewer setting is
// an error (or a warning where it only has no effect) at its line and
// column.
func TestReviewerProblemsNameTheirLine(t *testing.T) {
	head := "rules:\n  - name: r\n    tools: [\"*\"]\n    action: require_approval\n"
	for _, c := range []struct{ name, src, want string }{
		{"unknown key", "    reviewer: {endpoint: t, approve_beneath: 3}\n", `error 5:29: unknown field "approve_beneath" in rule "r": reviewer`},
		{"no endpoint", "    reviewer: {approve_below: 3, up_to_risk: low}\n", `error 5:5: rule "r": reviewer: endpoint is required`},
		{"bad endpoint", "    reviewer: {endpoint: \"https://x\"}\n", `error 5:26: rule "r": reviewer.endpoint: "https://x" is not a reviewer name`},
		{"score range", "    reviewer: {endpoint: t, approve_below: 101, up_to_risk: low}\n", `error 5:44: rule "r": reviewer.approve_below: 101 must be between 1 and 100`},
		{"zero", "    reviewer: {endpoint: t, approve_below: 0, up_to_risk: low}\n", `error 5:44: rule "r": reviewer.approve_below: 0 must be between 1 and 100`},
		{"not a number", "    reviewer: {endpoint: t, approve_below: low}\n", `error 5:44: rule "r": reviewer.approve_below must be a whole number`},
		{"no up_to_risk", "    reviewer: {endpoint: t, approve_below: 20}\n", `error 5:29: rule "r": reviewer: approve_below needs up_to_risk`},
		{"bad risk", "    reviewer: {endpoint: t, approve_below: 20, up_to_risk: severe}\n", `error 5:60: rule "r": reviewer.up_to_risk: unknown risk "severe"`},
		{"overlap", "    reviewer: {endpoint: t, approve_below: 20, up_to_risk: low, reject_above: 10}\n", `error 5:5: rule "r": reviewer: reject_above 10 is below approve_below 20`},
		{"reject range", "    reviewer: {endpoint: t, reject_above: 100}\n", `error 5:43: rule "r": reviewer.reject_above: 100 must be between 0 and 99`},
		{"timeout", "    reviewer: {endpoint: t, timeout: 10m}\n", `error 5:38: rule "r": reviewer.timeout: 10m0s must be between 1s and 2m0s`},
		{"not a mapping", "    reviewer: triage\n", `error 5:15: rule "r": reviewer must be a mapping`},
		{"up_to_risk alone", "    reviewer: {endpoint: t, up_to_risk: low}\n", `warning 5:29: rule "r": reviewer: up_to_risk has no effect without approve_below`},
		{"step-up", "    step_up: passkey\n    reviewer: {endpoint: t, approve_below: 20, up_to_risk: critical}\n", `warning 6:29: rule "r": reviewer.approve_below has no effect: the rule says step_up: passkey`},
		{"risk above", "    risk: high\n    reviewer: {endpoint: t, approve_below: 20, up_to_risk: medium}\n", `warning 6:29: rule "r": reviewer.approve_below has no effect: the rule's risk high is above up_to_risk medium`},
		{"sequence", "    approvers: [a, b]\n    order: sequence\n    reviewer: {endpoint: t, approve_below: 20, up_to_risk: high}\n", `warning 7:29: rule "r": reviewer.approve_below has no effect: the rule's approvers decide in sequence`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := format(policy.Lint([]byte(head + c.src)))
			if !strings.Contains(got, c.want) {
				t.Fatalf("lint:\n%s\nwant a line with %q", got, c.want)
			}
		})
	}
}

func TestReviewerOnARuleThatDoesNotGateHasNoEffect(t *testing.T) {
	got := format(policy.Lint([]byte("rules:\n  - name: r\n    tools: [\"*\"]\n    action: allow\n    reviewer: {endpoint: t}\n")))
	if !strings.Contains(got, `warning 5:5: rule "r": reviewer has no effect on a rule whose action is allow`) {
		t.Fatalf("lint:\n%s", got)
	}
}

// TestStricterReviewerDecidesNoMoreThanEither: the reviewer of a call that
// could fall under two rules approves only where both would let it, and
// rejects where either would.
func TestStricterReviewerDecidesNoMoreThanEither(t *testing.T) {
	n := func(i int) *int { return &i }
	alone := &policy.Reviewer{Endpoint: "triage", ApproveBelow: 30, UpToRisk: "high", RejectAbove: n(95), Timeout: 10 * time.Second}
	tighter := &policy.Reviewer{Endpoint: "triage", ApproveBelow: 20, UpToRisk: "medium", RejectAbove: n(80), Timeout: 5 * time.Second}
	advice := &policy.Reviewer{Endpoint: "triage", Timeout: 10 * time.Second}
	other := &policy.Reviewer{Endpoint: "audit", ApproveBelow: 50, UpToRisk: "critical", Timeout: time.Second}
	show := func(r *policy.Reviewer) string {
		if r == nil {
			return "none"
		}
		return fmt.Sprintf("%s below %d up to %q reject above %v", r.Endpoint, r.ApproveBelow, r.UpToRisk, deref(r.RejectAbove))
	}
	for _, c := range []struct {
		a, b *policy.Reviewer
		want string
	}{
		{nil, nil, "none"},
		{alone, nil, `triage below 0 up to "" reject above 95`},
		{nil, alone, `triage below 0 up to "" reject above 95`},
		{alone, tighter, `triage below 20 up to "medium" reject above 80`},
		{tighter, alone, `triage below 20 up to "medium" reject above 80`},
		{alone, advice, `triage below 0 up to "" reject above 95`},
		{alone, other, `triage below 0 up to "" reject above 95`},
	} {
		if got := show(policy.StricterReviewer(c.a, c.b)); got != c.want {
			t.Errorf("StricterReviewer(%s, %s) = %s, want %s", show(c.a), show(c.b), got, c.want)
		}
		for _, side := range []*policy.Reviewer{c.a, c.b} {
			d := policy.Decision{Action: policy.ActionRequireApproval, Quorum: 1, Reviewer: policy.StricterReviewer(c.a, c.b)}
			o := policy.Decision{Action: policy.ActionRequireApproval, Quorum: 1, Reviewer: side}
			if w := policy.WeakerThan(d, o); len(w) > 0 {
				t.Errorf("StricterReviewer(%s, %s) is weaker than %s: %v", show(c.a), show(c.b), show(side), w)
			}
		}
	}
}
