package bench

import (
	"runtime"
	"time"

	"github.com/countersign/countersign/orchestrator/policy/policybench"
)

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

// measurePolicy decides the call against the 100-rule policy for about d,
// in five rounds, and reports the median round, so a moment of noise from
// elsewhere on the machine does not decide the figure. The evaluating
// goroutine is locked to its thread so that the thread's CPU time is the
// evaluation's.
func measurePolicy(d time.Duration) PolicyReport {
	p, err := policybench.Policy()
	if err != nil {
		panic("bench: " + err.Error())
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
				p.Evaluate(policybench.Call)
			}
			calls += 1000
		}
		elapsed := time.Since(start)
		c1, _ := threadCPU()
		wall = append(wall, float64(elapsed.Nanoseconds())/float64(calls))
		cpu = append(cpu, float64((c1-c0).Nanoseconds())/float64(calls))
		total += calls
	}
	r := PolicyReport{Rules: policybench.Rules, Conditions: policybench.Conditions, Calls: total, WallNsPerCall: median(wall), CPUTime: cpuOK}
	r.NsPerCall = r.WallNsPerCall
	if cpuOK {
		r.NsPerCall = median(cpu)
	}
	return r
}
