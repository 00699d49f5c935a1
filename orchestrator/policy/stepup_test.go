package policy_test

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

const stepUpPolicy = `
version: "1"
default: deny
risk_defaults:
  critical:
    step_up: passkey
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob]
    step_up: passkey
  - name: deletions
    tools: ["db.drop"]
    action: require_approval
    risk: critical
    approvers: [alice]
  - name: email
    tools: ["email.send"]
    action: require_approval
    approvers: [alice]
`

func TestStepUpComesFromTheRuleOrItsRiskTier(t *testing.T) {
	p := mustParse(t, stepUpPolicy)
	for tool, want := range map[string]string{
		"payments.send": contracts.StepUpPasskey, // the rule's own
		"db.drop":       contracts.StepUpPasskey, // its risk tier's
		"email.send":    "",
	} {
		if d := p.Evaluate(call("bot", tool)); d.StepUp != want {
			t.Errorf("%s: step_up %q, want %q", tool, d.StepUp, want)
		}
	}
}

func TestStepUpIsCheckedInEveryRequest(t *testing.T) {
	p := mustParse(t, stepUpPolicy)
	d := p.Evaluate(call("bot", "payments.send"))
	req := &contracts.ApprovalRequested{
		Kind: contracts.KindToolApproval, Run: contracts.Run{Agent: "bot"},
		ToolCall:         &contracts.ToolCall{Name: "payments.send", ArgumentsSHA256: strings.Repeat("0", 64)},
		Policy:           contracts.PolicyRef{Rule: d.Rule, Version: d.Version},
		Quorum:           contracts.Quorum{Required: 1, Approvers: []string{"alice", "bob"}, Veto: true, Order: contracts.OrderAny},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject}, OnTimeout: contracts.OnTimeoutReject,
	}
	err := policy.VerifyRequest(req, d, policy.VerifyOptions{})
	if err == nil || !strings.Contains(err.Error(), "step_up") {
		t.Fatalf("a request without the rule's step_up: %v", err)
	}
	req.StepUp = contracts.StepUpPasskey
	if err := policy.VerifyRequest(req, d, policy.VerifyOptions{}); err != nil && strings.Contains(err.Error(), "step_up") {
		t.Fatalf("a request with the rule's step_up: %v", err)
	}
}

func TestStepUpRefusesWhatItCannotMean(t *testing.T) {
	for name, src := range map[string]string{
		"another kind": `
version: "1"
rules:
  - name: r
    tools: ["x"]
    action: require_approval
    step_up: sms
`,
		"with standing grants": `
version: "1"
rules:
  - name: r
    tools: ["x"]
    action: require_approval
    approvers: [alice]
    step_up: passkey
    grants: {scopes: [run], max_ttl: 1h}
`,
	} {
		if _, err := policy.Parse([]byte(src)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
