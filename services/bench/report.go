package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Report holds every figure of a run. It marshals to JSON as is.
type Report struct {
	Machine        Machine      `json:"machine"`
	Settings       Settings     `json:"settings"`
	StartedAt      time.Time    `json:"started_at"`
	ElapsedSeconds float64      `json:"elapsed_seconds"`
	Policy         PolicyReport `json:"policy"`
	// Modes holds, per sync mode, the median over the repetitions of
	// every figure (a ratio is the median of the ratios measured within
	// each repetition, against the baseline of the same server).
	Modes []ModeReport `json:"modes"`
	// Runs holds every repetition of every mode, in the order measured.
	Runs []ModeReport `json:"runs"`
	// Pending is the pending-capacity measurement, run once (also
	// attached to its mode in Modes).
	Pending *PendingReport `json:"pending,omitempty"`
	// Checks compares the figures with the budgets of DESIGN §9.
	Checks []Check `json:"checks"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	NATSServer string `json:"nats_server"`
}

// Settings are the run's configuration.
type Settings struct {
	Sync            string  `json:"sync"`
	DurationSeconds float64 `json:"duration_seconds"`
	Count           int     `json:"count"`
	Concurrency     int     `json:"concurrency"`
	// ArbiterConcurrency is 0 when the arbiter ran with its default.
	ArbiterConcurrency int `json:"arbiter_concurrency"`
	Pending            int `json:"pending"`
	RawPayloadBytes    int `json:"raw_payload_bytes"`
	ArgumentsBytes     int `json:"arguments_bytes"`
}

// ModeReport holds the figures of one sync mode: of one repetition (in
// Report.Runs) or the medians over all of them (in Report.Modes).
type ModeReport struct {
	Sync string `json:"sync"`
	// Repetition is the repetition's number, from 1 (0 for medians).
	Repetition int `json:"repetition,omitempty"`
	// Repetitions is how many repetitions the medians are taken over.
	Repetitions int `json:"repetitions,omitempty"`
	// GoProcs is the GOMAXPROCS the mode ran with: raised for a store that
	// syncs every write, as `countersign serve` raises it
	// (embedded.RaiseProcsForSyncWrites).
	GoProcs int            `json:"go_procs"`
	Raw     RawReport      `json:"raw"`
	Cycles  CycleReport    `json:"cycles"`
	Latency LatencyReport  `json:"decision_latency"`
	Pending *PendingReport `json:"pending,omitempty"`
}

// Check is one figure against its budget.
type Check struct {
	Mode   string  `json:"mode,omitempty"`
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target"`
	Pass   bool    `json:"pass"`
}

// Passed reports whether every check passed.
func (r *Report) Passed() bool {
	for _, c := range r.Checks {
		if !c.Pass {
			return false
		}
	}
	return len(r.Checks) > 0
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func machineInfo() Machine {
	return Machine{
		CPUs: runtime.NumCPU(), CPUModel: cpuModel(), GoVersion: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, NATSServer: server.VERSION,
	}
}

// cpuModel reads the processor's name from /proc/cpuinfo where there is one.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Budgets of DESIGN §9.
const (
	targetFloorRatio    = 0.5
	targetPolicyNs      = 5000
	targetBytesPerWait  = 2048
	targetGoroutineRate = 0.01 // goroutines added per wait: none, up to noise
	targetWakeSeconds   = 5
)

// latencyTargets are the decision → resumed budgets (p50, p99) in ms.
func latencyTargets(mode string) (p50, p99 float64) {
	if mode == SyncAlways || clustered(mode) {
		return 3, 20
	}
	return 1, 10
}

func checks(r *Report) []Check {
	out := []Check{{
		Name: fmt.Sprintf("policy evaluation, %d rules", r.Policy.Rules), Value: r.Policy.NsPerCall / 1000, Unit: "µs",
		Target: "≤ 5 µs", Pass: r.Policy.NsPerCall > 0 && r.Policy.NsPerCall <= targetPolicyNs,
	}}
	for _, m := range r.Modes {
		p50, p99 := latencyTargets(m.Sync)
		out = append(out,
			Check{Mode: m.Sync, Name: "cycles/s ÷ floor", Value: m.Cycles.FloorRatio, Unit: "×",
				Target: fmt.Sprintf("≥ %.2f", targetFloorRatio), Pass: m.Cycles.FloorRatio >= targetFloorRatio},
			Check{Mode: m.Sync, Name: "decision → resumed p50", Value: m.Latency.Latency.P50, Unit: "ms",
				Target: fmt.Sprintf("≤ %g ms", p50), Pass: m.Latency.Latency.N > 0 && m.Latency.Latency.P50 <= p50},
			Check{Mode: m.Sync, Name: "decision → resumed p99", Value: m.Latency.Latency.P99, Unit: "ms",
				Target: fmt.Sprintf("≤ %g ms", p99), Pass: m.Latency.Latency.N > 0 && m.Latency.Latency.P99 <= p99},
		)
		if pe := m.Pending; pe != nil && pe.Failed != "" {
			out = append(out, Check{Mode: m.Sync, Name: fmt.Sprintf("pending capacity, %d waits", pe.Waits), Unit: "(failed)",
				Target: "completes", Pass: false})
		} else if pe != nil {
			out = append(out,
				Check{Mode: m.Sync, Name: fmt.Sprintf("waiter memory, %d waits", pe.Waits), Value: pe.WaiterBytesPerWait, Unit: "B/wait",
					Target: fmt.Sprintf("< %d B", targetBytesPerWait), Pass: pe.WaiterPending >= pe.Waits && pe.WaiterBytesPerWait < targetBytesPerWait},
				Check{Mode: m.Sync, Name: "goroutines added by waits", Value: float64(pe.GoroutineDelta), Unit: "",
					Target: fmt.Sprintf("≈ 0 (< %g per wait)", targetGoroutineRate),
					Pass:   float64(pe.GoroutineDelta) < targetGoroutineRate*float64(pe.Waits)},
				Check{Mode: m.Sync, Name: "all woken after last decision", Value: pe.WakeAfterLastDecisionSeconds * 1000, Unit: "ms",
					Target: fmt.Sprintf("< %d s", targetWakeSeconds),
					Pass:   pe.Woken == pe.Waits && pe.WakeAfterLastDecisionSeconds < targetWakeSeconds},
			)
		}
	}
	return out
}

// printer writes the human-readable table.
type printer struct{ w io.Writer }

func newPrinter(w io.Writer) *printer { return &printer{w: w} }

func (p *printer) f(format string, args ...any) { fmt.Fprintf(p.w, format, args...) }

func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "MISS"
}

// num formats n with thousands separators and no decimals.
func num(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// value formats a measured figure with a sensible number of digits.
func value(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return num(v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case v == 0:
		return "0"
	}
	return fmt.Sprintf("%.3g", v)
}

func (p *printer) header(r *Report) {
	m := r.Machine
	p.f("countersign bench: %d CPU (%s), %s %s/%s, nats-server %s\n", m.CPUs, m.CPUModel, m.GoVersion, m.OS, m.Arch, m.NATSServer)
	s := r.Settings
	pending := "off"
	if s.Pending > 0 {
		pending = num(float64(s.Pending))
	}
	arb := "default"
	if s.ArbiterConcurrency > 0 {
		arb = fmt.Sprint(s.ArbiterConcurrency)
	}
	reps := fmt.Sprintf("%d repetitions", s.Count)
	if s.Count == 1 {
		reps = "1 repetition"
	}
	p.f("sync %s, %s of %gs per measurement, %d agents, arbiter concurrency %s, pending %s;\n"+
		"embedded server on disk, TCP loopback, one connection per role, all in this process\n\n",
		s.Sync, reps, s.DurationSeconds, s.Concurrency, arb, pending)
}

func (p *printer) policy(r PolicyReport) {
	clock := "wall"
	if r.CPUTime {
		clock = fmt.Sprintf("CPU; wall %.2f µs", r.WallNsPerCall/1000)
	}
	p.f("%-34s %10.2f µs/call      target ≤ 5 µs        %s  (%s)\n", fmt.Sprintf("policy, %d rules, %d conditions", r.Rules, r.Conditions),
		r.NsPerCall/1000, verdict(r.NsPerCall <= targetPolicyNs), clock)
}

func modeDesc(mode string) string {
	switch {
	case mode == SyncLazy:
		return "JetStream default flush, every 2 min"
	case clustered(mode):
		return fmt.Sprintf("%d nodes in this process, R3, fsync on every write", clusterNodes(mode))
	}
	return "fsync on every write"
}

func (p *printer) mode(mode string, rep, count int) {
	p.f("\n== sync %s (%s), repetition %d of %d ==\n", mode, modeDesc(mode), rep, count)
}

func (p *printer) pendingMode(mode string, n int) {
	p.f("\n== pending capacity: %s waits, sync %s (%s) ==\n", num(float64(n)), mode, modeDesc(mode))
}

func (p *printer) syncPublish(r *RawReport) {
	p.f("%-34s %10s/s   p50 %.3f ms  p99 %.3f ms\n", "raw sync publish", num(r.SyncPublishPerSec), r.SyncPublish.P50, r.SyncPublish.P99)
}

func (p *printer) asyncPublish(r *RawReport) {
	p.f("%-34s %10s/s   floor = ÷%d = %s cycles/s\n", fmt.Sprintf("raw async publish (window %d)", r.AsyncWindow),
		num(r.AsyncPublishPerSec), cycleWrites, num(r.FloorCyclesPerSec))
}

func (p *printer) kvPutWatch(r *RawReport) {
	p.f("%-34s %10s/s   p50 %.3f ms  p99 %.3f ms\n", "raw KV put→watch", num(r.KVPutsPerSec), r.KVPutWatch.P50, r.KVPutWatch.P99)
}

func (p *printer) cycles(mode string, c *CycleReport) {
	p.f("%-34s %10s/s   %.2f × floor       target ≥ %.2f       %s\n", fmt.Sprintf("full cycles (%d agents)", c.Agents),
		num(c.PerSec), c.FloorRatio, targetFloorRatio, verdict(c.FloorRatio >= targetFloorRatio))
	p.f("%-34s %10s     p50 %.2f ms  p99 %.2f ms  errors %d\n", "  cycle latency under load", "", c.Latency.P50, c.Latency.P99, c.Errors)
	p.f("%-34s %10s     %.0f ms before the window (untimed)\n", "  warm-up, one cycle per agent", "", c.WarmUpMs)
}

func (p *printer) latency(mode string, l *LatencyReport) {
	p50, p99 := latencyTargets(mode)
	d := l.Latency
	p.f("%-34s %10.3f ms    %.1f × KV put→watch  target ≤ %g ms        %s\n", fmt.Sprintf("decision → resumed p50 (n=%d)", d.N),
		d.P50, l.RatioToKVPutWatch, p50, verdict(d.N > 0 && d.P50 <= p50))
	p.f("%-34s %10.3f ms                       target ≤ %g ms       %s\n", "decision → resumed p99", d.P99, p99, verdict(d.N > 0 && d.P99 <= p99))
}

func (p *printer) pendingStep(s string) { p.f("  pending: %s\n", s) }

func (p *printer) timers(r *TimerReport) {
	p.f("%-34s %10s        (%.0f B each on HITL_TIMERS)\n", "timers held (expiry schedules)", num(float64(r.Held)), float64(r.Bytes)/max(float64(r.Held), 1))
	p.f("%-34s %10.1f ms     p99 %.1f ms  max %.1f ms  (%d of %d expired)\n", "  expiry lag past the deadline", r.LagP50, r.LagP99, r.LagMax, r.Expired, r.Probes)
}

func (p *printer) pending(r *PendingReport) {
	p.f("%-34s %10.0f B      target < %d B       %s\n", fmt.Sprintf("waiter memory per wait (%s)", num(float64(r.Waits))),
		r.WaiterBytesPerWait, targetBytesPerWait, verdict(r.WaiterPending >= r.Waits && r.WaiterBytesPerWait < targetBytesPerWait))
	p.f("%-34s %10.0f B      (server and records included)\n", "  process heap per pending approval", r.ProcessBytesPerApproval)
	p.f("%-34s %10d        target ≈ 0            %s\n", "goroutines added by the waits", r.GoroutineDelta,
		verdict(float64(r.GoroutineDelta) < targetGoroutineRate*float64(r.Waits)))
	p.f("%-34s %10.1f ms     target < %d s          %s\n", "all woken after last decision", r.WakeAfterLastDecisionSeconds*1000,
		targetWakeSeconds, verdict(r.Woken == r.Waits && r.WakeAfterLastDecisionSeconds < targetWakeSeconds))
	p.f("%-34s %10.1f s      (decided in %.1f s; %s woken, %s allowed)\n", "  first vote → last woken", r.TotalSeconds,
		r.DecideSeconds, num(float64(r.Woken)), num(float64(r.Allowed)))
}

// summary prints the medians of the modes side by side, with the range
// over the repetitions, then every check.
func (p *printer) summary(r *Report) {
	if len(r.Modes) > 0 {
		p.f("\n%-30s", fmt.Sprintf("summary: median of %d", r.Settings.Count))
		for _, m := range r.Modes {
			p.f(" %26s", m.Sync+" (min–max)")
		}
		p.f("\n")
		row := func(name string, format func(float64) string, val func(m ModeReport) float64) {
			p.f("%-30s", name)
			for _, m := range r.Modes {
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, run := range r.Runs {
					if run.Sync == m.Sync {
						lo, hi = min(lo, val(run)), max(hi, val(run))
					}
				}
				cell := format(val(m))
				if lo < hi {
					cell += " (" + format(lo) + "–" + format(hi) + ")"
				}
				p.f(" %26s", cell)
			}
			p.f("\n")
		}
		f1 := func(v float64) string { return fmt.Sprintf("%.1f", v) }
		f2 := func(v float64) string { return fmt.Sprintf("%.2f", v) }
		f3 := func(v float64) string { return fmt.Sprintf("%.3f", v) }
		row("Go processors (GOMAXPROCS)", num, func(m ModeReport) float64 { return float64(m.GoProcs) })
		row("raw sync publish /s", num, func(m ModeReport) float64 { return m.Raw.SyncPublishPerSec })
		row("raw sync publish p50 ms", f3, func(m ModeReport) float64 { return m.Raw.SyncPublish.P50 })
		row("raw async publish /s", num, func(m ModeReport) float64 { return m.Raw.AsyncPublishPerSec })
		row("floor cycles/s (async ÷ 6)", num, func(m ModeReport) float64 { return m.Raw.FloorCyclesPerSec })
		row("raw KV put→watch p50 ms", f3, func(m ModeReport) float64 { return m.Raw.KVPutWatch.P50 })
		row("raw KV put→watch p99 ms", f3, func(m ModeReport) float64 { return m.Raw.KVPutWatch.P99 })
		row("full cycles/s", num, func(m ModeReport) float64 { return m.Cycles.PerSec })
		row("  ÷ floor", f2, func(m ModeReport) float64 { return m.Cycles.FloorRatio })
		row("  ÷ raw sync publish /s", f3, func(m ModeReport) float64 { return m.Cycles.SyncPublishRatio })
		row("  cycle p50 ms under load", f1, func(m ModeReport) float64 { return m.Cycles.Latency.P50 })
		row("decision → resumed p50 ms", f3, func(m ModeReport) float64 { return m.Latency.Latency.P50 })
		row("decision → resumed p99 ms", f3, func(m ModeReport) float64 { return m.Latency.Latency.P99 })
		row("  p50 ÷ KV put→watch p50", f1, func(m ModeReport) float64 { return m.Latency.RatioToKVPutWatch })
	}
	if len(r.Checks) > 0 {
		p.f("\n%-6s %-34s %-8s %14s  %-22s\n", "", "check", "mode", "measured", "target")
		for _, c := range r.Checks {
			p.f("%-6s %-34s %-8s %14s  %-22s\n", verdict(c.Pass), c.Name, c.Mode, strings.TrimSpace(value(c.Value)+" "+c.Unit), c.Target)
		}
	}
	p.f("\nelapsed %.0f s\n", r.ElapsedSeconds)
}
