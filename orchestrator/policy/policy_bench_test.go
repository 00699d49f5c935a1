package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/orchestrator/policy"
)

// hundredRules is a policy of 100 glob rules in which only the last one
// matches billing-bot calling payments.eu.send_transfer. Half the globs start
// with '*', so the matcher scans the whole tool name; half the rules also
// filter on the agent.
func hundredRules(b *testing.B) *policy.Policy {
	b.Helper()
	var s strings.Builder
	s.WriteString("version: bench\ndefault: require_approval\nrules:\n")
	for i := range 99 {
		fmt.Fprintf(&s, "  - name: rule-%d\n    tools: [\"svc%02d.*.write_*\", \"*.admin_%02d_*\"]\n", i, i, i)
		if i%2 == 0 {
			fmt.Fprintf(&s, "    agents: [\"team-%02d-*\"]\n", i)
		}
		s.WriteString("    action: require_approval\n")
	}
	s.WriteString("  - name: payments\n    tools: [\"payments.*.send_*\"]\n    agents: [\"billing-*\"]\n" +
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
	if d := p.Evaluate("billing-bot", "payments.eu.send_transfer"); d.Rule != "payments" {
		b.Fatalf("matched %q, want payments", d.Rule)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Evaluate("billing-bot", "payments.eu.send_transfer")
	}
}

// BenchmarkEvaluateDefault decides a call no rule matches: every rule is
// tried, then the default applies.
func BenchmarkEvaluateDefault(b *testing.B) {
	p := hundredRules(b)
	if d := p.Evaluate("billing-bot", "unknown.tool"); d.Rule != "default" {
		b.Fatalf("matched %q, want default", d.Rule)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Evaluate("billing-bot", "unknown.tool")
	}
}
