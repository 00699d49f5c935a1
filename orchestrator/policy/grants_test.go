package policy_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

const grantsPolicy = `
version: g1
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    grants: {scopes: [call, run, agent], max_ttl: 8h, arguments: condition}
  - name: deploys
    tools: ["deploy"]
    action: require_approval
    grants: {scopes: [run], max_ttl: 1h}
  - name: shell
    tools: ["shell"]
    action: require_approval
`

func TestGrantsSetting(t *testing.T) {
	p, err := policy.Parse([]byte(grantsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in := func(tool string) policy.Decision {
		return p.Evaluate(policy.Input{Run: contracts.Run{Agent: "a"}, Tool: tool, Arguments: json.RawMessage(`{}`)})
	}
	pay := in("payments.send").Grants
	if pay == nil || strings.Join(pay.Scopes, ",") != "call,run,agent" || pay.MaxTTL != "8h0m0s" || pay.Arguments != "condition" {
		t.Fatalf("payments grants = %+v", pay)
	}
	dep := in("deploy").Grants
	if dep == nil || strings.Join(dep.Scopes, ",") != "run" || dep.MaxTTL != "1h0m0s" || dep.Arguments != "same" {
		t.Fatalf("deploy grants = %+v (arguments default to same)", dep)
	}
	if g := in("shell").Grants; g != nil {
		t.Fatalf("a rule without grants permits %+v; want none (only the call)", g)
	}
	// A caller that changes a decision's grants cannot change the policy.
	d := in("payments.send")
	d.Grants.Scopes[0] = "forever"
	if in("payments.send").Grants.Scopes[0] != "call" {
		t.Fatal("a decision's grants share memory with the policy")
	}
}

func TestGrantsSettingRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ grants, want string }{
		{`{scopes: [run, forever], max_ttl: 1h}`, `unknown grant scope "forever"`},
		{`{scopes: [agent]}`, "grants needs max_ttl"},
		{`{scopes: [run], max_ttl: 1h, arguments: any}`, "grants.arguments must be same or condition"},
		{`{scopes: [run], max_ttl: 1h, lifetime: 2h}`, "lifetime"},
	} {
		src := "version: x\nrules:\n  - name: r\n    tools: [t]\n    action: require_approval\n    grants: " + tc.grants + "\n"
		_, err := policy.Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("grants %s: err = %v, want it to mention %q", tc.grants, err, tc.want)
		}
	}
}

func TestVerifyRequestHoldsGrantsToTheRule(t *testing.T) {
	p, err := policy.Parse([]byte(grantsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{}`)
	sha, _ := contracts.ArgumentsSHA256(args)
	base := func(tool string, g *contracts.GrantLimits) *contracts.ApprovalRequested {
		d := p.Evaluate(policy.Input{Run: contracts.Run{Agent: "a"}, Tool: tool, Arguments: args})
		return &contracts.ApprovalRequested{
			Kind: contracts.KindToolApproval, Run: contracts.Run{Agent: "a"},
			ToolCall: &contracts.ToolCall{Name: tool, Arguments: args, ArgumentsSHA256: sha},
			Policy:   contracts.PolicyRef{Rule: d.Rule, Version: d.Version},
			Quorum:   contracts.Quorum{Required: 1, Veto: true, Order: contracts.OrderAny}, OnTimeout: contracts.OnTimeoutReject,
			AllowedDecisions: d.AllowedDecisions, Grants: g,
		}
	}
	for _, tc := range []struct {
		name, tool string
		g          *contracts.GrantLimits
		want       string
	}{
		{"as the rule", "deploy", &contracts.GrantLimits{Scopes: []string{"run"}, MaxTTL: "1h", Arguments: "same"}, ""},
		{"narrower", "payments.send", &contracts.GrantLimits{Scopes: []string{"run"}, MaxTTL: "30m", Arguments: "same"}, ""},
		{"none", "deploy", nil, ""},
		{"another scope", "deploy", &contracts.GrantLimits{Scopes: []string{"run", "agent"}, MaxTTL: "1h", Arguments: "same"}, `grants.scopes lists "agent"`},
		{"longer", "deploy", &contracts.GrantLimits{Scopes: []string{"run"}, MaxTTL: "2h", Arguments: "same"}, "grants.max_ttl 2h0m0s is longer"},
		{"condition", "deploy", &contracts.GrantLimits{Scopes: []string{"run"}, MaxTTL: "1h", Arguments: "condition"}, "grants.arguments condition"},
		{"rule without grants", "shell", &contracts.GrantLimits{Scopes: []string{"run"}, MaxTTL: "1h", Arguments: "same"}, "the rule permits no grant"},
	} {
		req := base(tc.tool, tc.g)
		d := p.Evaluate(policy.RequestInput(req))
		err := policy.VerifyRequest(req, d, policy.VerifyOptions{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestGrantCondition(t *testing.T) {
	c, err := policy.CompileGrantCondition(`args.amount <= 100 && tenant == "acme"`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args, tenant string
		want         bool
	}{
		{`{"amount": 50}`, "acme", true}, {`{"amount": 500}`, "acme", false}, {`{"amount": 50}`, "globex", false}, {`{}`, "acme", false},
	} {
		got, _ := c.Match(context.Background(), policy.Input{Run: contracts.Run{Tenant: tc.tenant}, Arguments: json.RawMessage(tc.args)})
		if got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.args, tc.tenant, got, tc.want)
		}
	}
	if _, err := policy.CompileGrantCondition(`args.amount +`); err == nil {
		t.Error("a condition that does not parse compiled")
	}
	if _, err := policy.CompileGrantCondition(`"yes"`); err == nil {
		t.Error("a condition that is no bool compiled")
	}
}
