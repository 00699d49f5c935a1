package policy_test

import (
	"encoding/json"
	"fmt"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

func Example() {
	p, err := policy.Parse([]byte(`
version: "2026-11-23.1"
groups:
  finance: [alice, bob]
rules:
  - name: big-payments
    tools: ["payments.*"]
    when: 'args.amount > 100 && run.tenant == "prod"'
    action: require_approval
    risk: high
    approvers: ["group:finance"]
    summary: "Pay {{args.amount}} EUR to {{args.recipient}}"
  - name: small-payments
    tools: ["payments.*"]
    action: allow
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	run := contracts.Run{Agent: "billing-bot", Tenant: "prod"}
	for _, args := range []string{`{"amount": 250, "recipient": "ACME"}`, `{"amount": 20}`, `{"recipient": "ACME"}`} {
		d := p.Evaluate(policy.Input{Run: run, Tool: "payments.send", Arguments: json.RawMessage(args)})
		fmt.Printf("%s by %s, approvers %v, error %q\n", d.Action, d.Rule, d.Approvers, d.Error)
	}
	// Output:
	// require_approval by big-payments, approvers [alice bob], error ""
	// allow by small-payments, approvers [], error ""
	// require_approval by big-payments, approvers [alice bob], error "args has no field \"amount\" (CEL: no such key: amount)"
}

func ExamplePolicy_Explain() {
	p, _ := policy.Parse([]byte(`
rules:
  - name: big-payments
    tools: ["payments.*"]
    when: args.amount > 100
    action: require_approval
  - name: small-payments
    tools: ["payments.*"]
    action: allow
`))
	_, steps := p.Explain(policy.Input{Tool: "payments.send", Arguments: json.RawMessage(`{"amount": 20}`)})
	for _, s := range steps {
		fmt.Printf("%d %s %v: %s\n", s.Line, s.Rule, s.Matched, s.Why)
	}
	// Output:
	// 3 big-payments false: tool payments.send matches payments.*; condition args.amount > 100 is false
	// 7 small-payments true: tool payments.send matches payments.*
}

func ExampleLint() {
	for _, p := range policy.Lint([]byte(`
rules:
  - name: everything
    tools: ["*"]
    action: require_approval
    approvers: ["group:ops"]
  - name: no-shell
    tools: ["shell.*"]
    when: args.cmd.startsWith(rm)
    action: deny
`)) {
		fmt.Println(p.Severity, p)
	}
	// Output:
	// warning 6:17: rule "everything": approvers: unknown approver group "ops" (define it under groups:); until it is, nobody can approve as it
	// warning 7:5: rule "no-shell" is unreachable: rule "everything" (line 3) comes first and matches every call it matches
	// error 9:31: rule "no-shell": when: undeclared reference to 'rm'
}
