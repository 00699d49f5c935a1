package history_test

import (
	"fmt"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/history"
	"github.com/countersign/countersign/orchestrator/policy"
)

// BenchmarkReview reviews calls of one agent on an embedded server: with a
// policy that reads no history (the fact is published without waiting),
// and with one that counts the agent's calls (published with the expected
// last sequence, acknowledged and applied before the next review).
func BenchmarkReview(b *testing.B) {
	for _, c := range []struct{ name, policy string }{
		{"no-history", "version: b\ndefault: require_approval\nrules:\n  - name: pay\n    tools: [pay]\n    when: 'args.amount >= 5'\n    action: deny\n  - name: ok\n    tools: [pay]\n    action: allow\n"},
		{"history", "version: b\ndefault: require_approval\nrules:\n  - name: pay\n    tools: [pay]\n    when: 'history.count(\"pay\", duration(\"1h\")) >= 1000000'\n    action: deny\n  - name: ok\n    tools: [pay]\n    action: allow\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := benchBus(b)
			s := benchOpen(b, srv)
			p, err := policy.Parse([]byte(c.policy))
			if err != nil {
				b.Fatal(err)
			}
			run := contracts.Run{ID: "r", Agent: "a", Tenant: "t"}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				call := history.Call{ID: fmt.Sprint(i), Tool: "pay", Run: run, Arguments: []byte(`{"amount":1}`)}
				err := s.Review(b.Context(), call, p.HistoryUse(), func(h policy.History) string {
					in := policy.Input{Run: run, Tool: call.Tool, Arguments: call.Arguments, History: h}
					return verdictOf(p.Evaluate(in))
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
