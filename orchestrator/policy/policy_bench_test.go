package policy_test

import (
	"testing"

	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/orchestrator/policy/policybench"
)

// benchCall is the call the benchmarks decide (see policybench).
var benchCall = policybench.Call

// hundredRules is policybench's 100-rule policy, which `countersign bench`
// measures too.
func hundredRules(b *testing.B) *policy.Policy {
	b.Helper()
	p, err := policybench.Policy()
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkEvaluate100Rules decides one call against 100 rules where the
// last one matches (budget: 5 µs per call).
func BenchmarkEvaluate100Rules(b *testing.B) {
	p := hundredRules(b)
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
