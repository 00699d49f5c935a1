package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"

	"github.com/countersign/countersign/services/bench"
)

// benchAbout is the long help of 'countersign bench'.
const benchAbout = `Measures Countersign on this machine against the budgets of DESIGN §9, with
an embedded NATS server on disk in a temporary directory (TCP loopback, one
connection per role, everything in this process). For each sync mode (fsync
on every write, the default of 'serve', and JetStream's lazy flush) and each
repetition, against a fresh server:

  - the raw JetStream baseline: sync publish, async publish (floor = async
    rate ÷ 6 persisted writes per cycle) and paced KV put→watch latency;
  - full cycles: concurrent agents review a gated call, a bot approves it on
    the requested event, the arbiter decides, the waiter wakes the agent and
    the agent claims its permit; cycles/s and the ratio to the floor;
  - decision → resumed latency, one approval at a time, p50 and p99.

Then, once, the pending-capacity run: N waits held at once through
Gate.ReviewAsync, the waiter's memory per wait, the goroutines the waits add,
and how long after the last decision the last run is woken.

The summary gives the median of each figure over the repetitions, with its
range, and each budget with PASS or MISS. The defaults take about three
minutes on two cores; figures from a shared machine are noisy.
`

func cmdBench(args []string, out io.Writer) error {
	fs := newFlagSet("bench", out)
	syncMode := fs.String("sync", bench.SyncBoth, "JetStream mode: always (fsync every write), lazy, both side by side, cluster (3 nodes in this process, R3, fsync), or all three")
	duration := fs.Duration("duration", bench.DefaultDuration, "length of each timed measurement")
	count := fs.Int("count", bench.DefaultCount, "repetitions of every mode, each on a fresh server; figures are medians")
	concurrency := fs.Int("concurrency", bench.DefaultConcurrency, "concurrent agents in the throughput run")
	arbiterConcurrency := fs.Int("arbiter-concurrency", 0, "messages each arbiter consume loop handles at once (0: the arbiter's default)")
	pending := fs.Int("pending", bench.DefaultPending, "concurrent waits in the pending-capacity run (0 skips it); lazy sync unless -sync always")
	dir := fs.String("dir", "", "parent directory of the stores (a temporary one by default); each store is removed afterwards")
	jsonOut := fs.Bool("json", false, "print the report as JSON instead of the table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	if *count < 1 || *duration <= 0 || *concurrency < 1 {
		return fmt.Errorf("bench: -count and -concurrency must be at least 1 and -duration positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := bench.Config{
		Dir: *dir, Sync: *syncMode, Duration: *duration, Count: *count, Concurrency: *concurrency,
		ArbiterConcurrency: *arbiterConcurrency, Pending: *pending, Out: out,
	}
	if *jsonOut {
		cfg.Out = io.Discard
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, cfg)
	if *jsonOut && rep != nil {
		if werr := rep.WriteJSON(out); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}
