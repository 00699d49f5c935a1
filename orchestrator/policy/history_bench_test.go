package policy_test

import (
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// constHistory answers every figure with the same value, as a store's view
// would without its scan (BenchmarkFigure in orchestrator/history measures
// the scan).
type constHistory float64

func (h constHistory) Figure(policy.HistoryQuery) (float64, error) { return float64(h), nil }

// BenchmarkHistoryCondition decides one call against a rule whose
// condition reads the history, and against the same rule with a condition
// over the arguments, in the same run.
func BenchmarkHistoryCondition(b *testing.B) {
	for _, c := range []struct{ name, when string }{
		{"plain", `args.amount >= 5`},
		{"history", `history.count("payments.*", duration("1h")) >= 5`},
		{"history-sum", `history.tenant.sum("payments.*", "amount", duration("24h")) > 10000.0`},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := policy.Parse([]byte("version: b\ndefault: require_approval\nrules:\n  - name: r\n    tools: [\"payments.*\"]\n    when: '" +
				c.when + "'\n    action: deny\n  - name: ok\n    tools: [\"payments.*\"]\n    action: allow\n"))
			if err != nil {
				b.Fatal(err)
			}
			in := policy.Input{Run: contracts.Run{ID: "r", Agent: "a", Tenant: "t"}, Tool: "payments.send",
				Arguments: []byte(`{"amount": 1, "currency": "EUR"}`), History: constHistory(1)}
			if d := p.Evaluate(in); d.Rule != "ok" || d.Error != "" {
				b.Fatalf("decided by %s (%s)", d.Rule, d.Error)
			}
			b.ReportAllocs()
			for b.Loop() {
				p.Evaluate(in)
			}
		})
	}
}
