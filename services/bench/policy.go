package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/orchestrator/policy"
)

// Policy size and the call evaluated against it: only the last rule matches.
const (
	policyRules = 100
	policyAgent = "billing-bot"
	policyTool  = "payments.eu.send_transfer"
)

// PolicyReport is the cost of deciding one tool call.
type PolicyReport struct {
	Rules     int     `json:"rules"`
	Calls     int     `json:"calls"`
	NsPerCall float64 `json:"ns_per_call"`
}

// benchPolicy is a policy of n glob rules in which only the last one
// matches policyAgent calling policyTool; half the globs start with '*', which
// makes the matcher scan the whole name.
func benchPolicy(n int) *policy.Policy {
	var b strings.Builder
	b.WriteString("version: bench\ndefault: require_approval\nrules:\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "  - name: rule-%d\n    tools: [\"svc%02d.*.write_*\", \"*.admin_%02d_*\"]\n", i, i, i)
		if i%2 == 0 {
			fmt.Fprintf(&b, "    agents: [\"team-%02d-*\"]\n", i)
		}
		b.WriteString("    action: require_approval\n")
	}
	b.WriteString("  - name: payments\n    tools: [\"payments.*.send_*\"]\n    agents: [\"billing-*\"]\n" +
		"    action: require_approval\n    risk: high\n    approvers: [alice, bob]\n    quorum: 1\n")
	p, err := policy.Parse([]byte(b.String()))
	if err != nil {
		panic("bench: the benchmark policy does not parse: " + err.Error())
	}
	return p
}

// measurePolicy evaluates the call against a 100-rule policy for about d,
// in five rounds, and reports the median round, so a moment of noise from
// elsewhere on the machine does not decide the figure.
func measurePolicy(d time.Duration) PolicyReport {
	p := benchPolicy(policyRules)
	if got := p.Evaluate(policyAgent, policyTool).Rule; got != "payments" {
		panic("bench: the benchmark policy matched " + got)
	}
	const rounds = 5
	perCall := make([]float64, 0, rounds)
	total := 0
	for range rounds {
		calls := 0
		start := time.Now()
		for time.Since(start) < d/rounds {
			for range 1000 {
				p.Evaluate(policyAgent, policyTool)
			}
			calls += 1000
		}
		perCall = append(perCall, float64(time.Since(start).Nanoseconds())/float64(calls))
		total += calls
	}
	slices.Sort(perCall)
	return PolicyReport{Rules: policyRules, Calls: total, NsPerCall: perCall[rounds/2]}
}
