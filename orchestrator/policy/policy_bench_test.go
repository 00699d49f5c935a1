package policy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// benchCall is the call the benchmarks decide: a billing agent paying 250
// EUR in the prod tenant.
var benchCall = policy.Input{
	Run: contracts.Run{
		ID: "run-1", Agent: "billing-bot", Tenant: "prod", RequestedBy: "user-7",
		Labels: map[string]string{"env": "prod", "team": "finance"},
	},
	Tool:      "payments.eu.send_transfer",
	Arguments: json.RawMessage(`{"amount":250,"currency":"EUR","recipient":"ACME GmbH","reference":"INV-2026-0042"}`),
}

// hundredRules is a policy of 100 rules in which only the last one decides
// benchCall. Every rule has tool globs (half of them start with '*', so the
// matcher scans the whole name), half also filter on the agent, and a third
// have a condition. The 90 rules for other tools never match, so their
// conditions never run; the 9 payments rules before the last match by glob
// and their conditions run and are false; the last rule's is true — ten
// conditions evaluated per call, the arguments decoded once.
func hundredRules(b *testing.B) *policy.Policy {
	b.Helper()
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
	s.WriteString("  - name: payments\n    tools: [\"payments.*.send_*\"]\n    agents: [\"billing-*\"]\n" +
		"    when: 'args.amount > 100 && run.tenant == \"prod\"'\n" +
		"    action: require_approval\n    risk: high\n    approvers: [alice, bob]\n    quorum: 1\n")
	p, err := policy.Parse([]byte(s.String()))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkEvaluate100Rules decides one call against 100 rules where the
// last one matches (budget: 5 µs per call).
func BenchmarkEvaluate100Rules(b *testing.B) {
	p := hundredRules(b)
	if d := p.Evaluate(benchCall); d.Rule != "payments" || d.Error != "" {
		b.Fatalf("decided %+v, want rule payments", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Evaluate(benchCall)
	}
}

// BenchmarkEvaluateDefault decides a call no rule matches: every glob is
// tried, no condition runs, then the default applies.
func BenchmarkEvaluateDefault(b *testing.B) {
	p := hundredRules(b)
	in := benchCall
	in.Tool = "unknown.tool"
	if d := p.Evaluate(in); d.Rule != "default" {
		b.Fatalf("matched %q, want default", d.Rule)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Evaluate(in)
	}
}

// BenchmarkExplain100Rules is Evaluate100Rules with the explanation.
func BenchmarkExplain100Rules(b *testing.B) {
	p := hundredRules(b)
	b.ReportAllocs()
	for b.Loop() {
		p.Explain(benchCall)
	}
}
