package policy_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// The attacks reported against deploy/policies/payments.yaml
// (payments-2026-11-23.2, kept in testdata/attacks): arguments that make
// an earlier rule's condition error used to get that rule's weaker gate
// (one finance approver) instead of very-large's (critical, two
// approvers). Each attack must get at least what the well-typed call gets,
// under the policy as reported and as shipped now.

const wellTypedPayment = `{"amount": 1000000, "currency": "EUR", "recipient": "Mallory", "recipient_country": "DE"}`

var paymentAttacks = []struct {
	name, args string
}{
	{"recipient_country left out", `{"amount": 1000000, "currency": "EUR", "recipient": "Mallory"}`},
	{"the amount as a string, recipient_country left out", `{"amount": "250000", "currency": "EUR", "recipient": "Mallory"}`},
	{"the amount as a string", `{"amount": "250000", "currency": "EUR", "recipient": "Mallory", "recipient_country": "DE"}`},
	{"a dummy argument nested 9990 deep", `{"pad": ` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) +
		`, "amount": 1000000, "currency": "EUR", "recipient": "Mallory", "recipient_country": "DE"}`},
}

func TestReportedAttacks(t *testing.T) {
	run := contracts.Run{ID: "r1", Agent: "billing-bot", Tenant: "prod-eu"}
	for _, file := range []string{"testdata/attacks/payments-2026-11-23.2.yaml", "../../deploy/policies/payments.yaml"} {
		p, err := policy.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		want := p.Evaluate(policy.Input{Run: run, Tool: "payments.send", Arguments: json.RawMessage(wellTypedPayment)})
		if want.Rule != "very-large" || want.Risk != contracts.RiskCritical || want.Quorum != 2 {
			t.Fatalf("%s: the well-typed payment gets %+v, want very-large", file, want)
		}
		for _, a := range paymentAttacks {
			t.Run(p.Version()+"/"+a.name, func(t *testing.T) {
				in := policy.Input{Run: run, Tool: "payments.send", Arguments: json.RawMessage(a.args)}
				got := p.Evaluate(in)
				if got.Action == policy.ActionAllow {
					t.Fatalf("allowed: %+v", got)
				}
				if weaker := policy.WeakerThan(got, want); len(weaker) > 0 {
					t.Errorf("rule %s, error %q: weaker than the well-typed call's very-large: %s", got.Rule, got.Error, strings.Join(weaker, "; "))
				}
				e, steps := p.Explain(in)
				if !reflect.DeepEqual(e, got) {
					t.Errorf("Explain decided %+v, Evaluate %+v", e, got)
				}
				if got.Error == "" {
					return // the policy refuses the call as written, without an error
				}
				if last := steps[len(steps)-1]; last.Rule != got.Rule || !strings.Contains(last.Why, "condition error: ") ||
					!strings.Contains(last.Why, "the call gets the strictest of ") {
					t.Errorf("last step %+v does not say which rule won and why", last)
				}
			})
		}
	}
}

// TestAttackOnAnAllowRuleFirst: an allow rule whose condition errors used to
// gate with default_rule's settings (one finance approver) even where a
// later rule asks two for the well-typed call.
func TestAttackOnAnAllowRuleFirst(t *testing.T) {
	p := mustParse(t, `
version: a1
groups: {finance: [alice, bob, carol], treasury: [dana, erik]}
default_rule: {risk: high, approvers: ["group:finance"]}
rules:
  - name: small-payments
    tools: [payments.send]
    when: args.amount <= 100
    action: allow
  - name: very-large
    tools: [payments.send]
    when: args.amount >= 10000
    action: require_approval
    risk: critical
    quorum: 2
    approvers: ["group:treasury", "group:finance"]
    timeout: 2h
`)
	run := contracts.Run{ID: "r1", Agent: "billing", RequestedBy: "erin"}
	want := p.Evaluate(policy.Input{Run: run, Tool: "payments.send", Arguments: json.RawMessage(`{"amount": 250000}`)})
	in := policy.Input{Run: run, Tool: "payments.send", Arguments: json.RawMessage(`{"amount": "250000"}`)}
	got := p.Evaluate(in)
	if got.Rule != "very-large" || got.Risk != contracts.RiskCritical || got.Quorum != 2 || got.Timeout != policy.DefaultTimeout ||
		!strings.Contains(got.Error, `args.amount is a string ("250000")`) {
		t.Errorf("the amount as a string: %+v", got)
	}
	if weaker := policy.WeakerThan(got, want); len(weaker) > 0 {
		t.Errorf("weaker than the well-typed call: %q", weaker)
	}
	d, steps := p.Explain(in)
	if !reflect.DeepEqual(d, got) {
		t.Errorf("Explain decided %+v, Evaluate %+v", d, got)
	}
	wantWhy := []struct{ rule, why string }{
		{"small-payments", `condition error: args.amount is a string ("250000")`},
		{"small-payments", "if it held, require_approval: risk high, 1 of alice, bob, carol"},
		{"very-large", "if it held, require_approval: risk critical, 2 of dana, erik, alice, bob, carol"},
		{"default", "no rule matched"},
		{"very-large", "the call gets the strictest of small-payments (require_approval: risk high, 1 of alice, bob, carol, on_timeout reject after 24h), very-large (require_approval: risk critical, 2 of dana, erik, alice, bob, carol, on_timeout reject after 2h), default (require_approval: risk high, 1 of alice, bob, carol, on_timeout reject after 24h): very-large decides, require_approval: risk critical, 2 of dana, erik, alice, bob, carol, on_timeout reject after 24h"},
	}
	for _, w := range wantWhy {
		found := false
		for _, s := range steps {
			found = found || s.Rule == w.rule && strings.Contains(s.Why, w.why)
		}
		if !found {
			t.Errorf("no step of rule %s says %q; steps:\n%+v", w.rule, w.why, steps)
		}
	}
	if last := steps[len(steps)-1]; last.Rule != "very-large" || !last.Matched {
		t.Errorf("last step %+v", last)
	}

	// The arbiter evaluates the same policy on the same arguments: the
	// gate's snapshot of the combined decision passes, one with the weaker
	// gate the allow rule used to give is refused.
	req := snapshot(t, p, toolRequest("payments.send", `{"amount": "250000"}`), nil)
	if err := policy.VerifyRequest(&req, p.Evaluate(policy.RequestInput(&req)), verifyOpts); err != nil {
		t.Errorf("the honest snapshot is refused: %v", err)
	}
	weak := req
	weak.Policy.Rule = "small-payments"
	weak.Quorum.Required, weak.Quorum.Approvers = 1, []string{"alice", "bob", "carol"}
	var re *policy.RequestError
	if err := policy.VerifyRequest(&weak, p.Evaluate(policy.RequestInput(&weak)), verifyOpts); !errors.As(err, &re) || re.Reason != contracts.RefusalRuleMismatch {
		t.Errorf("the old weaker snapshot: %v", err)
	}
}
