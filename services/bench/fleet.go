package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/orchestrator"
)

// Waiter kinds of the fleet mode.
const (
	// WaiterKeyed is orchestrator.NewWaiter: each process follows the
	// records it waits on.
	WaiterKeyed = "keyed"
	// WaiterBucket is orchestrator.NewBucketWaiter: each process watches
	// the whole approvals bucket (the library's waiter before the keyed one).
	WaiterBucket = "bucket"
)

// FleetConfig says which fleets to measure.
type FleetConfig struct {
	// Dir is the parent of the stores (a temporary directory if empty).
	Dir string
	// Processes are the fleet sizes: agent processes, each a NATS
	// connection of its own with its own gate and waiter.
	Processes []int
	// Decisions is how many approvals are decided at each size, spread
	// over the processes (at least one wait each).
	Decisions int
	// Waiters are the waiter kinds measured at each size (default both).
	Waiters []string
	// Modes are the stores measured, each with every size and kind:
	// SyncLazy (the default), SyncAlways, SyncCluster. Each is its own row
	// group, so one run compares them.
	Modes []string
	// Count is the repetitions of each size and kind; figures are medians.
	Count int
	// Out receives a table as the measurements complete.
	Out io.Writer
}

// FleetReport is one fleet's figures: medians over the repetitions, with
// the range of the latencies.
type FleetReport struct {
	// Sync is the store: lazy, always (one node, fsync) or cluster (three
	// nodes, R3, fsync; the fleet's connections spread over them).
	Sync        string `json:"sync"`
	Processes   int    `json:"processes"`
	Waiter      string `json:"waiter"`
	Decisions   int    `json:"decisions"`
	Repetitions int    `json:"repetitions"`
	// CyclesPerSec is decisions resumed per second, from the first vote
	// to the last resume.
	CyclesPerSec float64 `json:"cycles_per_sec"`
	// ResumeP50Ms and ResumeP99Ms are vote published → review resumed.
	ResumeP50Ms float64    `json:"resume_p50_ms"`
	ResumeP99Ms float64    `json:"resume_p99_ms"`
	P99RangeMs  [2]float64 `json:"resume_p99_range_ms"`
	// MsgsPerDecision and BytesPerDecision are what the servers sent
	// while the decisions were made and resumed, per decision: to all
	// their clients (the arbiter, the voter and the fleet) and, on a
	// cluster, to each other (replication and routed messages).
	MsgsPerDecision  float64 `json:"msgs_per_decision"`
	BytesPerDecision float64 `json:"bytes_per_decision"`
	// FleetMsgsPerDecision is the part of it the fleet's connections
	// received.
	FleetMsgsPerDecision float64 `json:"fleet_msgs_per_decision"`
	// Error says why this fleet could not be measured (no figures then).
	Error string `json:"error,omitempty"`
}

// Fleet measures decision → resumed for fleets of agent processes.
func Fleet(ctx context.Context, cfg FleetConfig) ([]FleetReport, error) {
	if len(cfg.Processes) == 0 || cfg.Decisions < 1 {
		return nil, errors.New("bench: fleet needs process counts and at least one decision")
	}
	if len(cfg.Waiters) == 0 {
		cfg.Waiters = []string{WaiterKeyed, WaiterBucket}
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = []string{SyncLazy}
	}
	for _, m := range cfg.Modes {
		if m != SyncLazy && m != SyncAlways && !clustered(m) {
			return nil, fmt.Errorf("bench: fleet: FleetConfig.Modes must hold lazy, always, cluster or cluster5, got %q", m)
		}
	}
	cfg.Count = max(cfg.Count, 1)
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	root := cfg.Dir
	if root == "" {
		d, err := os.MkdirTemp("", "countersign-fleet-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		root = d
	}
	fmt.Fprintf(cfg.Out, "%-8s %-10s %-7s %10s %12s %12s %14s %12s %12s\n", "sync", "processes", "waiter", "decisions", "cycles/s", "resume p50", "resume p99", "msgs/dec", "fleet msgs/dec")
	var out []FleetReport
	for _, mode := range cfg.Modes {
		for _, n := range cfg.Processes {
			for _, kind := range cfg.Waiters {
				r, err := fleetRepeat(ctx, root, mode, n, kind, cfg)
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				out = append(out, r)
				if err != nil {
					// A fleet the server cannot hold is a finding, reported
					// as such, never as figures.
					fmt.Fprintf(cfg.Out, "%-8s %-10d %-7s failed: %v\n", mode, n, kind, err)
					continue
				}
				fmt.Fprintf(cfg.Out, "%-8s %-10d %-7s %10d %12.0f %10.2fms %10.2fms (%.2f–%.2f) %10.1f %12.1f\n", mode, r.Processes, r.Waiter, r.Decisions,
					r.CyclesPerSec, r.ResumeP50Ms, r.ResumeP99Ms, r.P99RangeMs[0], r.P99RangeMs[1], r.MsgsPerDecision, r.FleetMsgsPerDecision)
			}
		}
	}
	return out, nil
}

// fleetRepeat measures one fleet cfg.Count times and returns the medians,
// or the report of the failure that stopped it (with its error).
func fleetRepeat(ctx context.Context, root, mode string, n int, kind string, cfg FleetConfig) (FleetReport, error) {
	var runs []FleetReport
	for range cfg.Count {
		r, err := fleetOnce(ctx, root, mode, n, cfg.Decisions, kind)
		if err != nil {
			return FleetReport{Sync: mode, Processes: n, Waiter: kind, Decisions: cfg.Decisions, Error: err.Error()}, err
		}
		runs = append(runs, *r)
	}
	return fleetMedian(runs), nil
}

func fleetMedian(runs []FleetReport) FleetReport {
	pick := func(f func(FleetReport) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return median(v)
	}
	m := runs[0]
	m.Repetitions = len(runs)
	m.CyclesPerSec = pick(func(r FleetReport) float64 { return r.CyclesPerSec })
	m.ResumeP50Ms = pick(func(r FleetReport) float64 { return r.ResumeP50Ms })
	m.ResumeP99Ms = pick(func(r FleetReport) float64 { return r.ResumeP99Ms })
	m.MsgsPerDecision = pick(func(r FleetReport) float64 { return r.MsgsPerDecision })
	m.BytesPerDecision = pick(func(r FleetReport) float64 { return r.BytesPerDecision })
	m.FleetMsgsPerDecision = pick(func(r FleetReport) float64 { return r.FleetMsgsPerDecision })
	p99s := make([]float64, len(runs))
	for i, r := range runs {
		p99s[i] = r.ResumeP99Ms
	}
	m.P99RangeMs = [2]float64{slices.Min(p99s), slices.Max(p99s)}
	return m
}

// fleetProcess is one agent process: a connection, a waiter and a gate.
type fleetProcess struct {
	js     jetstream.JetStream
	waiter *orchestrator.Waiter
	gate   *orchestrator.Gate
}

// fleetOnce measures one fleet on a fresh store of the given mode.
func fleetOnce(ctx context.Context, root, mode string, processes, decisions int, kind string) (*FleetReport, error) {
	st, err := startStack(ctx, mode, root, 0)
	if err != nil {
		return nil, err
	}
	defer st.close()
	fleet, err := startFleet(ctx, st, processes, kind)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range fleet {
			_ = p.gate.Close()
			_ = p.waiter.Close()
		}
	}()
	b, err := startBot(ctx, st, false)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	waits, err := parkFleet(ctx, fleet, b, max(decisions, processes))
	if err != nil {
		return nil, err
	}
	before, fleetBefore := serverOut(st.servers), fleetIn(fleet)
	start := time.Now()
	for _, w := range waits {
		msg, id := voteMsg(w.eventID)
		w.votedAt = time.Now()
		if _, err := st.voterJS.PublishMsgAsync(msg, jetstream.WithMsgID(id), jetstream.WithStallWait(time.Minute)); err != nil {
			return nil, fmt.Errorf("vote: %w", err)
		}
	}
	lat := make([]time.Duration, 0, len(waits))
	for _, w := range waits {
		select {
		case at := <-w.resumed:
			lat = append(lat, at.Sub(w.votedAt))
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("a review of %s never resumed", w.eventID)
		}
	}
	elapsed := time.Since(start)
	after, fleetAfter := serverOut(st.servers), fleetIn(fleet)
	n := float64(len(waits))
	slices.Sort(lat)
	return &FleetReport{
		Sync: mode, Processes: processes, Waiter: kind, Decisions: len(waits), Repetitions: 1,
		CyclesPerSec: n / elapsed.Seconds(), ResumeP50Ms: ms(percentile(lat, 0.50)), ResumeP99Ms: ms(percentile(lat, 0.99)),
		MsgsPerDecision:      float64(after.msgs-before.msgs) / n,
		BytesPerDecision:     float64(after.bytes-before.bytes) / n,
		FleetMsgsPerDecision: float64(fleetAfter-fleetBefore) / n,
	}, nil
}

// startFleet connects the processes, each as the orchestrator role.
func startFleet(ctx context.Context, st *stack, processes int, kind string) ([]*fleetProcess, error) {
	fleet := make([]*fleetProcess, 0, processes)
	for range processes {
		_, js, err := st.connect(roleAgent)
		if err != nil {
			return fleet, err
		}
		p := &fleetProcess{js: js}
		if kind == WaiterBucket {
			p.waiter, err = orchestrator.NewBucketWaiter(ctx, js, nil)
		} else {
			p.waiter, err = orchestrator.NewWaiter(ctx, js, nil)
		}
		if err != nil {
			return fleet, err
		}
		if p.gate, err = orchestrator.NewGate(ctx, orchestrator.Config{JS: js, Waiter: p.waiter}); err != nil {
			_ = p.waiter.Close()
			return fleet, err
		}
		fleet = append(fleet, p)
	}
	return fleet, nil
}

// fleetWait is one parked review.
type fleetWait struct {
	eventID string
	votedAt time.Time
	resumed chan time.Time
}

// parkFleet has the fleet's processes propose total calls between them
// (round robin) and returns once every review is parked and its record
// pending.
func parkFleet(ctx context.Context, fleet []*fleetProcess, b *bot, total int) ([]*fleetWait, error) {
	waits := make([]*fleetWait, total)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for i := range total {
		p := fleet[i%len(fleet)]
		run := newRun(fmt.Sprintf("fleet-%d", len(fleet)), i)
		w := &fleetWait{eventID: orchestrator.EventID(run, benchCallID), resumed: make(chan time.Time, 1)}
		waits[i] = w
		pending := b.expectPending(w.eventID)
		call := orchestrator.ToolCall{ID: benchCallID, Name: benchTool, Arguments: benchArguments}
		if err := p.gate.ReviewAsync(ctx, run, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
			at := time.Now()
			if err == nil && (len(v) != 1 || v[0].Verdict != orchestrator.VerdictAllowed) {
				err = fmt.Errorf("verdict %+v", v)
			}
			if err != nil {
				errs <- err
			}
			w.resumed <- at
		}); err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-pending:
			case <-ctx.Done():
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return waits, ctx.Err()
}

// outCount is what the servers have sent their clients.
type outCount struct{ msgs, bytes int64 }

func serverOut(servers []*server.Server) outCount {
	var c outCount
	for _, s := range servers {
		v, err := s.Varz(nil)
		if err == nil {
			c.msgs += v.OutMsgs
			c.bytes += v.OutBytes
		}
	}
	return c
}

// fleetIn is the messages the fleet's connections have received.
func fleetIn(fleet []*fleetProcess) uint64 {
	var n uint64
	for _, p := range fleet {
		n += p.js.Conn().Stats().InMsgs
	}
	return n
}
