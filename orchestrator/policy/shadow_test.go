package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

const shadowPolicy = `version: shadow-1
default: require_approval
rules:
  - name: reads
    tools: ["read_*"]
    action: allow
  - name: deny-large
    mode: shadow
    tools: [pay]
    when: 'args.amount > 100'
    action: deny
  - name: pay
    tools: [pay]
    action: require_approval
    risk: high
  - name: deny-lists
    mode: shadow
    tools: ["read_*", "list_*"]
    action: deny
  - name: no-shell
    tools: [shell]
    action: deny
`

// TestShadowVerdicts: a shadow rule records what the policy would decide
// with it enforced, only where it matches before the enforcing decision;
// an erroring condition records the strictest, as enforced it would be.
// The flips counted over the calls are exactly the expected ones.
func TestShadowVerdicts(t *testing.T) {
	p, err := policy.Parse([]byte(shadowPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.RuleNames(); !slices.Equal(got, []string{"reads", "pay", "no-shell"}) {
		t.Errorf("RuleNames = %v", got)
	}
	if got := p.ShadowRules(); len(got) != 2 || got[0].Name != "deny-large" || got[0].Line != 7 || got[1].Action != policy.ActionDeny {
		t.Errorf("ShadowRules = %+v", got)
	}
	calls := []struct {
		tool, args, enforced string
		shadow               []string // rule=action
	}{
		{"read_file", `{}`, "reads", nil},
		{"pay", `{"amount": 500}`, "pay", []string{"deny-large=deny"}},
		{"pay", `{"amount": 5}`, "pay", nil},
		{"pay", `{"amount": "500"}`, "pay", []string{"deny-large=deny"}},
		{"list_things", `{}`, "default", []string{"deny-lists=deny"}},
		{"shell", `{}`, "no-shell", nil},
	}
	flips := map[string]int{}
	for _, c := range calls {
		in := policy.Input{Run: contracts.Run{Agent: "a"}, Tool: c.tool, Arguments: json.RawMessage(c.args)}
		d, vs := p.EvaluateShadow(context.Background(), in)
		if d.Rule != c.enforced || !sameDecision(d, p.Evaluate(in)) {
			t.Errorf("%s %s: decided by %s, want %s", c.tool, c.args, d.Rule, c.enforced)
		}
		var got []string
		for _, v := range vs {
			got = append(got, v.Rule+"="+v.Decision.Action)
			if v.Flips(d) {
				flips[fmt.Sprintf("%s %s→%s", v.Rule, d.Action, v.Decision.Action)]++
			}
		}
		if !slices.Equal(got, c.shadow) {
			t.Errorf("%s %s: shadow verdicts %v, want %v", c.tool, c.args, got, c.shadow)
		}
	}
	want := map[string]int{"deny-large require_approval→deny": 2, "deny-lists require_approval→deny": 1}
	if !maps.Equal(flips, want) {
		t.Errorf("flips %v, want %v", flips, want)
	}

	// The erroring condition's verdict carries the error, as enforced.
	_, vs := p.EvaluateShadow(context.Background(), policy.Input{Run: contracts.Run{Agent: "a"}, Tool: "pay", Arguments: json.RawMessage(`{"amount": "500"}`)})
	if len(vs) != 1 || vs[0].Decision.Error == "" || !strings.Contains(vs[0].Decision.Reason, "could not check") {
		t.Errorf("erroring shadow verdict = %+v", vs)
	}

	// Explain shows the shadow rule's step before the deciding one.
	d, steps := p.Explain(policy.Input{Run: contracts.Run{Agent: "a"}, Tool: "pay", Arguments: json.RawMessage(`{"amount": 500}`)})
	if d.Rule != "pay" || len(steps) != 3 || !steps[1].Shadow || !steps[1].Matched || steps[2].Rule != "pay" || steps[2].Shadow ||
		!strings.Contains(steps[1].Why, "shadow rule, not enforced: enforced here, the call would get deny") {
		t.Errorf("Explain: %s, steps %+v", d.Rule, steps)
	}
}

func sameDecision(a, b policy.Decision) bool {
	return a.Action == b.Action && a.Rule == b.Rule && a.Line == b.Line && a.Risk == b.Risk && a.Error == b.Error
}

// TestShadowRuleLint: a shadow rule hides no rule below it; a shadow rule
// an enforcing rule hides is reported; a mode other than enforce or shadow
// is refused.
func TestShadowRuleLint(t *testing.T) {
	src := `default: require_approval
rules:
  - {name: all, mode: shadow, tools: ["*"], action: deny}
  - {name: reads, tools: ["read_*"], action: allow}
  - {name: never, mode: shadow, tools: ["read_x"], action: deny}
  - {name: x, mode: enforce, tools: [x], action: allow}
`
	var msgs []string
	for _, pr := range policy.Lint([]byte(src)) {
		msgs = append(msgs, pr.String())
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0], `rule "never" is unreachable: rule "reads"`) {
		t.Errorf("lint: %q", msgs)
	}
	_, err := policy.Parse([]byte(strings.Replace(src, "mode: enforce", "mode: dry-run", 1)))
	if err == nil || !strings.Contains(err.Error(), `unknown mode "dry-run" (enforce, shadow)`) {
		t.Errorf("Parse: %v", err)
	}
}

// TestVerifyRequestIgnoresShadow: the check of a request is the same
// against a policy with shadow rules as without them, and no shadow
// verdict a request carries (an honest one or a forged one that would
// allow the call) changes it.
func TestVerifyRequestIgnoresShadow(t *testing.T) {
	base, err := policy.Parse([]byte(verifyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	shadowed, err := policy.Parse([]byte(strings.Replace(verifyPolicy, "rules:\n", `rules:
  - {name: allow-all, mode: shadow, tools: ["*"], action: allow}
  - {name: deny-payments, mode: shadow, tools: [payments.send], action: deny}
`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	members := map[string][]string{"ops": {"oli"}}
	forged := []contracts.ShadowVerdict{{Rule: "allow-all", Action: policy.ActionAllow}, {Rule: "payments", Action: policy.ActionRequireApproval, Quorum: 1}}
	for _, req := range []contracts.ApprovalRequested{
		toolRequest("payments.send", `{"amount": 5000}`), toolRequest("payments.send", `{"amount": 5}`),
		toolRequest("payments.send", `{"amount": "x"}`), question("Which account?"),
	} {
		honest := snapshot(t, base, req, members)
		weak := honest
		weak.Quorum.Required = 0
		weak.Quorum.Veto = false
		for _, r := range []contracts.ApprovalRequested{honest, weak} {
			want := policy.VerifyRequest(&r, base.Evaluate(policy.RequestInput(&r)), verifyOpts)
			for _, shadow := range [][]contracts.ShadowVerdict{nil, forged} {
				r.Shadow = shadow
				got := policy.VerifyRequest(&r, shadowed.Evaluate(policy.RequestInput(&r)), verifyOpts)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s %s, shadow %v: %v, want %v", r.Policy.Rule, policy.RequestInput(&r).Arguments, shadow, got, want)
				}
			}
		}
		if err := policy.VerifyRequest(&weak, shadowed.Evaluate(policy.RequestInput(&weak)), verifyOpts); err == nil && base.Evaluate(policy.RequestInput(&weak)).Quorum > 1 {
			t.Errorf("a weakened request passes: %+v", weak.Quorum)
		}
	}
}
