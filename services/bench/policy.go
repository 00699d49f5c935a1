package bench

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// policyRules is the size of the measured policy.
const policyRules = 100

// PolicyReport is the cost of deciding one tool call.
type PolicyReport struct {
	Rules int `json:"rules"`
	// Conditions is the number of rule conditions evaluated per call.
	Conditions int `json:"conditions_evaluated"`
	Calls      int `json:"calls"`
	// NsPerCall is the CPU time of the evaluating thread per call where
	// the OS reports it (Linux), else the wall time: on a shared machine
	// the wall clock also counts the time the thread waited for a CPU.
	NsPerCall float64 `json:"ns_per_call"`
	// WallNsPerCall is the wall time per call.
	WallNsPerCall float64 `json:"wall_ns_per_call"`
	// CPUTime says whether NsPerCall is thread CPU time.
	CPUTime bool `json:"cpu_time"`
}

// policyCall is the call decided: a billing agent paying 250 EUR in the
// prod tenant (the call of BenchmarkEvaluate100Rules in orchestrator/policy).
var policyCall = policy.Input{
	Run: contracts.Run{
		ID: "run-1", Agent: "billing-bot", Tenant: "prod", RequestedBy: "user-7",
		Labels: map[string]string{"env": "prod", "team": "finance"},
	},
	Tool:      "payments.eu.send_transfer",
	Arguments: json.RawMessage(`{"amount":250,"currency":"EUR","recipient":"ACME GmbH","reference":"INV-2026-0042"}`),
}

// policyConditions is the number of conditions evaluating policyCall runs.
const policyConditions = 10

// benchPolicy is the 100-rule policy of BenchmarkEvaluate100Rules, in which
// only the last rule decides policyCall. Every rule has tool globs (half
// start with '*', so the matcher scans the whole name), half also filter on
// the agent, and a third have a condition. The 90 rules for other tools
// never match; the 9 payments rules before the last match by glob and their
// conditions are false; the last one's is true.
func benchPolicy() *policy.Policy {
	var b strings.Builder
	b.WriteString("version: bench\ndefault: require_approval\nrules:\n")
	for i := range 90 {
		fmt.Fprintf(&b, "  - name: rule-%d\n    tools: [\"svc%02d.*.write_*\", \"*.admin_%02d_*\"]\n", i, i, i)
		if i%2 == 0 {
			fmt.Fprintf(&b, "    agents: [\"team-%02d-*\"]\n", i)
		}
		if i%3 == 0 {
			fmt.Fprintf(&b, "    when: 'args.size > %d && run.tenant == \"prod\"'\n", i*10)
		}
		b.WriteString("    action: require_approval\n")
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
		fmt.Fprintf(&b, "  - name: payments-%d\n    tools: [\"payments.*\"]\n    agents: [\"billing-*\", \"ops-*\"]\n    when: '%s'\n    action: deny\n", i, c)
	}
	b.WriteString("  - name: payments\n    tools: [\"payments.*.send_*\"]\n    agents: [\"billing-*\"]\n" +
		"    when: 'args.amount > 100 && run.tenant == \"prod\"'\n" +
		"    action: require_approval\n    risk: high\n    approvers: [alice, bob]\n    quorum: 1\n")
	p, err := policy.Parse([]byte(b.String()))
	if err != nil {
		panic("bench: the benchmark policy does not parse: " + err.Error())
	}
	return p
}

// measurePolicy decides the call against the 100-rule policy for about d,
// in five rounds, and reports the median round, so a moment of noise from
// elsewhere on the machine does not decide the figure. The evaluating
// goroutine is locked to its thread so that the thread's CPU time is the
// evaluation's.
func measurePolicy(d time.Duration) PolicyReport {
	p := benchPolicy()
	if got := p.Evaluate(policyCall); got.Rule != "payments" || got.Error != "" {
		panic(fmt.Sprintf("bench: the benchmark policy decided %+v", got))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rounds = 5
	var wall, cpu []float64
	total := 0
	_, cpuOK := threadCPU()
	for range rounds {
		calls := 0
		c0, _ := threadCPU()
		start := time.Now()
		for time.Since(start) < d/rounds {
			for range 1000 {
				p.Evaluate(policyCall)
			}
			calls += 1000
		}
		elapsed := time.Since(start)
		c1, _ := threadCPU()
		wall = append(wall, float64(elapsed.Nanoseconds())/float64(calls))
		cpu = append(cpu, float64((c1-c0).Nanoseconds())/float64(calls))
		total += calls
	}
	r := PolicyReport{Rules: policyRules, Conditions: policyConditions, Calls: total, WallNsPerCall: median(wall), CPUTime: cpuOK}
	r.NsPerCall = r.WallNsPerCall
	if cpuOK {
		r.NsPerCall = median(cpu)
	}
	return r
}
