package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// claim_within: how long an approval may be claimed before it lapses, per
// rule, 15 minutes by default, and a request may not ask for longer.
func TestClaimWithin(t *testing.T) {
	p, err := policy.Parse([]byte(`version: cw
rules:
  - name: pay
    tools: [payments.send]
    action: require_approval
    claim_within: 2m
  - name: other
    tools: ["*"]
    action: require_approval
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Evaluate(policy.Input{Tool: "payments.send", Arguments: []byte(`{}`)}); d.ClaimWithin != 2*time.Minute {
		t.Errorf("rule pay: claim_within %s, want 2m", d.ClaimWithin)
	}
	d := p.Evaluate(policy.Input{Tool: "deploy", Arguments: []byte(`{}`)})
	if d.ClaimWithin != contracts.DefaultClaimWithin {
		t.Errorf("rule other: claim_within %s, want the default %s", d.ClaimWithin, contracts.DefaultClaimWithin)
	}
	for _, bad := range []string{"0s", "48h", "soon"} {
		_, err := policy.Parse([]byte("version: x\nrules:\n  - name: r\n    tools: [t]\n    action: require_approval\n    claim_within: " + bad + "\n"))
		if err == nil || !strings.Contains(err.Error(), "claim_within") {
			t.Errorf("claim_within %s: %v, want an error naming claim_within", bad, err)
		}
	}
	// A request that asks to be claimable for longer than its rule says
	// is weaker than the policy.
	pd := p.Evaluate(policy.Input{Tool: "payments.send", Arguments: []byte(`{}`)})
	req := &contracts.ApprovalRequested{Kind: contracts.KindToolApproval, Policy: contracts.PolicyRef{Rule: "pay", Version: "cw"},
		Quorum: contracts.Quorum{Required: 1, Veto: true}, OnTimeout: contracts.OnTimeoutReject, ClaimWithin: "1h",
		ToolCall: &contracts.ToolCall{Name: "payments.send", Arguments: []byte(`{}`)}, Risk: pd.Risk, AllowedDecisions: pd.AllowedDecisions}
	err = policy.VerifyRequest(req, pd, policy.VerifyOptions{})
	if err == nil || !strings.Contains(err.Error(), "claim_within") {
		t.Errorf("a request claimable for 1h under a 2m rule: %v, want refused naming claim_within", err)
	}
}
