package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/bench"
)

// TestRunSmoke runs every measurement briefly. It checks that the harness
// produces figures, not how good they are: timing budgets are for the
// bench command on a quiet machine, not for tests.
func TestRunSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Dir: t.TempDir(), Sync: bench.SyncLazy, Duration: time.Second,
		Count: 2, Concurrency: 8, Pending: 200, Out: &out,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if len(rep.Modes) != 1 || rep.Modes[0].Sync != bench.SyncLazy || rep.Modes[0].Repetitions != 2 {
		t.Fatalf("modes: %+v", rep.Modes)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Repetition != 1 || rep.Runs[1].Repetition != 2 {
		t.Fatalf("runs: %+v", rep.Runs)
	}
	if rep.Pending == nil || rep.Pending != rep.Modes[0].Pending {
		t.Fatalf("pending figures not attached to their mode: %+v", rep.Pending)
	}
	m := rep.Modes[0]
	positive := map[string]float64{
		"policy ns/call":          rep.Policy.NsPerCall,
		"sync publish/s":          m.Raw.SyncPublishPerSec,
		"sync publish p50":        m.Raw.SyncPublish.P50,
		"async publish/s":         m.Raw.AsyncPublishPerSec,
		"floor":                   m.Raw.FloorCyclesPerSec,
		"KV put→watch p50":        m.Raw.KVPutWatch.P50,
		"cycles/s":                m.Cycles.PerSec,
		"cycles ÷ floor":          m.Cycles.FloorRatio,
		"cycles ÷ sync publish":   m.Cycles.SyncPublishRatio,
		"decision latency p50":    m.Latency.Latency.P50,
		"decision latency p99":    m.Latency.Latency.P99,
		"latency ratio to KV p50": m.Latency.RatioToKVPutWatch,
	}
	for name, v := range positive {
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if m.Cycles.Completed == 0 {
		t.Error("no cycle completed")
	}
	pe := m.Pending
	if pe == nil {
		t.Fatal("no pending-capacity figures")
	}
	if pe.Waits != 200 || pe.Woken != 200 || pe.Allowed != 200 || pe.WaiterPending != 200 {
		t.Errorf("pending: %d waits, %d held by the waiter, %d woken, %d allowed; want 200 each",
			pe.Waits, pe.WaiterPending, pe.Woken, pe.Allowed)
	}
	if tr := pe.Timers; tr == nil || tr.Held < 200 || tr.Expired != tr.Probes || tr.LagP50 <= 0 || tr.LagP99 < tr.LagP50 || tr.LagMax < tr.LagP99 {
		t.Errorf("timer figures: %+v, want every probe expired with a lag, and the 200 pending schedules held", tr)
	}
	if pe.TotalSeconds <= 0 || pe.DecideSeconds <= 0 {
		t.Errorf("pending timings: total %v s, decide %v s", pe.TotalSeconds, pe.DecideSeconds)
	}
	if len(rep.Checks) == 0 {
		t.Error("no checks")
	}
	for _, want := range []string{"full cycles", "decision → resumed", "waiter memory", "summary: median of 2", "repetition 2 of 2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	var back bench.Report
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("report JSON: %v", err)
	}
	if len(back.Modes) != 1 || back.Modes[0].Cycles.Completed != m.Cycles.Completed {
		t.Errorf("report did not survive JSON: %+v", back.Modes)
	}
}

func TestConfigIsValidated(t *testing.T) {
	_, err := bench.Run(context.Background(), bench.Config{Sync: "sometimes", Concurrency: -1, Count: -1})
	for _, field := range []string{"Config.Sync", "Config.Concurrency", "Config.Count"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("err = %v, want an error naming %s", err, field)
		}
	}
}

// The cluster mode runs the same measurements against three nodes with R3
// streams and buckets.
func TestRunClusterSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Dir: t.TempDir(), Sync: bench.SyncCluster, Duration: time.Second, Count: 1, Concurrency: 8, Out: &out,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if len(rep.Modes) != 1 || rep.Modes[0].Sync != bench.SyncCluster {
		t.Fatalf("modes: %+v", rep.Modes)
	}
	m := rep.Modes[0]
	if m.Raw.SyncPublishPerSec <= 0 || m.Cycles.PerSec <= 0 || m.Latency.Latency.P50 <= 0 {
		t.Errorf("cluster figures: raw %+v cycles %+v latency %+v", m.Raw, m.Cycles, m.Latency)
	}
	if !bytes.Contains(out.Bytes(), []byte("3 nodes in this process, R3")) {
		t.Errorf("the report does not say what the cluster mode is:\n%s", out.String())
	}
}

// The fleet mode runs end to end at small sizes and reports what it
// measured: every review resumed, and the server's deliveries counted.
func TestFleetSmoke(t *testing.T) {
	reps, err := bench.Fleet(context.Background(), bench.FleetConfig{Dir: t.TempDir(), Processes: []int{1, 4}, Decisions: 8, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 4 {
		t.Fatalf("%d reports, want 4 (two sizes, two waiter kinds)", len(reps))
	}
	for _, r := range reps {
		if r.Sync != bench.SyncLazy || r.Decisions != 8 || r.CyclesPerSec <= 0 || r.ResumeP99Ms <= 0 || r.MsgsPerDecision <= 0 || r.FleetMsgsPerDecision <= 0 {
			t.Errorf("report %+v", r)
		}
	}

	// On three nodes the fleet's connections spread over the cluster, and
	// the servers' messages per decision include replication.
	cl, err := bench.Fleet(context.Background(), bench.FleetConfig{Dir: t.TempDir(), Processes: []int{3}, Decisions: 6,
		Waiters: []string{bench.WaiterKeyed}, Modes: []string{bench.SyncCluster}, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(cl) != 1 || cl[0].Sync != bench.SyncCluster || cl[0].Error != "" || cl[0].Decisions != 6 || cl[0].FleetMsgsPerDecision <= 0 {
		t.Fatalf("cluster reports %+v", cl)
	}
	if cl[0].MsgsPerDecision <= reps[0].MsgsPerDecision {
		t.Errorf("cluster: %.1f messages per decision, not more than one node's %.1f: replication is not counted", cl[0].MsgsPerDecision, reps[0].MsgsPerDecision)
	}

	if _, err := bench.Fleet(context.Background(), bench.FleetConfig{Processes: []int{1}, Decisions: 1, Modes: []string{"both"}}); err == nil {
		t.Error("a fleet on store \"both\" was accepted; it is two stores, each its own mode")
	}
}

// The records mode seeds a history, starts an API replica on it twice and
// times its listings and inbox pages; the index holds only the pending
// records and the newest decided ones, and every listing answers in full.
func TestRecordsSmoke(t *testing.T) {
	var out bytes.Buffer
	reps, err := bench.Records(context.Background(), bench.RecordsConfig{
		Dir: t.TempDir(), Sizes: []int{2000}, Pending: 20, Recent: 300, Queries: 2, Restarts: 2, Out: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].Error != "" {
		t.Fatalf("reports %+v\n%s", reps, out.String())
	}
	r := reps[0]
	if r.Indexed != 20+300 {
		t.Errorf("the index holds %d records, want the 20 pending and 300 decided", r.Indexed)
	}
	if r.ReadySeconds <= 0 || r.StoreBytes == 0 || len(r.Listings) != 12 {
		t.Errorf("report %+v", r)
	}
	want := map[string]int{"pending": 20, "approver=me": 20, "history, page 3": 50, "approver=me, history": 50, "history, rejected of an agent": 20}
	for _, l := range r.Listings {
		if n, ok := want[l.Name]; ok && l.Items != n {
			t.Errorf("%s: %d items, want %d", l.Name, l.Items, n)
		}
		if l.Items == 0 || !(l.P50Ms > 0) || l.P99Ms < l.P50Ms {
			t.Errorf("%s: %+v", l.Name, l)
		}
	}
	if !strings.Contains(out.String(), "records in its index") {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestFsyncModeRaisesProcsAsServeDoes runs the fsync store briefly: the
// mode runs with the processors `countersign serve` gives a store that
// syncs every write, and the process gets its own number back afterwards.
func TestFsyncModeRaisesProcsAsServeDoes(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	before := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Dir: t.TempDir(), Sync: bench.SyncBoth, Duration: time.Second,
		Count: 1, Concurrency: 4, Out: &out,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	procs := map[string]int{}
	for _, m := range rep.Runs {
		procs[m.Sync] = m.GoProcs
		if m.Cycles.Completed == 0 {
			t.Errorf("sync %s: no cycle completed", m.Sync)
		}
	}
	if want := embedded.SyncWriteProcs(before); procs[bench.SyncAlways] != want {
		t.Errorf("fsync mode ran with GOMAXPROCS %d, want %d (%d raised as serve raises it)", procs[bench.SyncAlways], want, before)
	}
	if procs[bench.SyncLazy] != before {
		t.Errorf("lazy mode ran with GOMAXPROCS %d, want the process's %d", procs[bench.SyncLazy], before)
	}
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("GOMAXPROCS after the run = %d, want %d back", got, before)
	}
	if !strings.Contains(out.String(), "Go processors (GOMAXPROCS)") {
		t.Errorf("table does not name the processors:\n%s", out.String())
	}
}
