// Package policybench holds the policy-evaluation workload measured by both
// the Go benchmark in orchestrator/policy and `countersign bench`, so the two
// figures describe the same thing.
package policybench

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Call is the call decided: a billing agent paying 250 EUR in the prod tenant.
var Call = policy.Input{
	Run: contracts.Run{
		ID: "run-1", Agent: "billing-bot", Tenant: "prod", RequestedBy: "user-7",
		Labels: map[string]string{"env": "prod", "team": "finance"},
	},
	Tool:      "payments.eu.send_transfer",
	Arguments: json.RawMessage(`{"amount":250,"currency":"EUR","recipient":"ACME GmbH","reference":"INV-2026-0042"}`),
}

// Rules is the number of rules of the policy Source returns, Conditions the
// number of conditions deciding Call evaluates, and DecidingRule the rule
// that decides it.
const (
	Rules        = 100
	Conditions   = 10
	DecidingRule = "payments"
)

// Source is a policy of 100 rules in which only the last one decides Call.
// Every rule has tool globs (half start with '*', so the matcher scans the
// whole name), half also filter on the agent, and a third have a condition.
// The 90 rules for other tools never match, so their conditions never run;
// the 9 payments rules before the last match by glob and their conditions
// run and are false; the last one's is true: ten conditions per call, the
// arguments decoded once.
func Source() []byte {
	var s strings.Builder
	s.WriteString("version: bench\ndefault: require_approval\nrules:\n")
	for i := range 90 {
		fmt.Fprintf(&s, "  - name: rule-%d\n    tools: [\"svc%02d.*.write_*\", \"*.admin_%02d_*\"]\n", i, i, i)
		if i%2 == 0 {
			fmt.Fprintf(&s, "    agents: [\"team-%02d-*\"]\n", i)
		}
		if i%3 == 0 {
			fmt.Fprintf(&s, "    when: 'args.size > %d && run.tenant == \"prod\"'\n", i*10)
		}
		s.WriteString("    action: require_approval\n")
	}
	conds := []string{
		`args.amount > 100000`,
		`args.currency == "USD" && args.amount > 50`,
		`args.recipient.startsWith("internal-")`,
		`tenant == "staging"`,
		`labels.team == "ops"`,
		`has(args.iban) && args.iban.startsWith("XX")`,
		`args.amount < 0`,
		`args.reference.matches("^TEST-")`,
		`run.requested_by == run.owner && args.amount > 10`,
	}
	for i, c := range conds {
		fmt.Fprintf(&s, "  - name: payments-%d\n    tools: [\"payments.*\"]\n    agents: [\"billing-*\", \"ops-*\"]\n    when: '%s'\n    action: deny\n", i, c)
	}
	s.WriteString("  - name: " + DecidingRule + "\n    tools: [\"payments.*.send_*\"]\n    agents: [\"billing-*\"]\n" +
		"    when: 'args.amount > 100 && run.tenant == \"prod\"'\n" +
		"    action: require_approval\n    risk: high\n    approvers: [alice, bob]\n    quorum: 1\n")
	return []byte(s.String())
}

// Policy parses Source and checks that it decides Call by DecidingRule.
func Policy() (*policy.Policy, error) {
	p, err := policy.Parse(Source())
	if err != nil {
		return nil, fmt.Errorf("policybench: the policy does not parse: %w", err)
	}
	if d := p.Evaluate(Call); d.Rule != DecidingRule || d.Error != "" {
		return nil, fmt.Errorf("policybench: the policy decided %+v, want rule %s", d, DecidingRule)
	}
	return p, nil
}
