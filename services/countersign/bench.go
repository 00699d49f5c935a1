package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"

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

With -fleet 1,10,100,1000 it measures fleets instead: that many agent
processes (each a NATS connection with its own gate and waiter) hold
-fleet-decisions reviews between them, all decided at once; for each size
and waiter kind (keyed: the library's waiter; bucket: one watch of the whole
bucket per process) it reports cycles/s, vote → resumed p50 and p99, and the
messages the server delivered per decision, in all and to the fleet. It
runs on a lazy-sync store unless -sync names others (both, always,
cluster, all: each a row group of the same run).

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
	fleet := fs.String("fleet", "", "measure fleets of these many agent processes instead (comma-separated, e.g. 1,10,100,1000)")
	fleetDecisions := fs.Int("fleet-decisions", 1000, "decisions at each fleet size, spread over its processes")
	fleetWaiters := fs.String("fleet-waiters", "keyed,bucket", "waiter kinds measured at each fleet size: keyed, bucket")
	records := fs.String("records", "", "measure an API replica on stored histories of these many approvals instead (comma-separated, e.g. 10000,1000000; the first is the baseline); -count restarts each")
	recordsPending := fs.Int("records-pending", 1000, "pending approvals among each history's records")
	indexRecent := fs.Int("index-recent", 0, "decided approvals the API's index keeps (0: the API's default)")
	recordsQueries := fs.Int("records-queries", 100, "times each listing is timed per restart")
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
	if *records != "" {
		sizes, err := positiveList("-records", *records)
		if err != nil {
			return err
		}
		sync := *syncMode
		if sync == bench.SyncBoth {
			sync = bench.SyncLazy // the flag's default; a history is seeded into one store
		}
		cfg := bench.RecordsConfig{Dir: *dir, Sizes: sizes, Pending: *recordsPending, Recent: *indexRecent, Sync: sync,
			Queries: *recordsQueries, Restarts: *count, Out: out}
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			cfg.Profile = f
		}
		if *jsonOut {
			cfg.Out = io.Discard
		}
		reps, err := bench.Records(ctx, cfg)
		return writeJSONIf(out, *jsonOut, reps, err)
	}
	if *fleet != "" {
		modes, err := fleetModes(fs.FlagSet, *syncMode)
		if err != nil {
			return err
		}
		return runFleet(ctx, out, *fleet, *fleetWaiters, modes, *fleetDecisions, *count, *dir, *jsonOut)
	}
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

// fleetModes is the stores bench -fleet measures: lazy unless -sync says
// otherwise (both: lazy and always; all: lazy, always and cluster).
func fleetModes(fs *flag.FlagSet, mode string) ([]string, error) {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "sync" })
	switch {
	case !set:
		return []string{bench.SyncLazy}, nil
	case mode == bench.SyncBoth:
		return []string{bench.SyncLazy, bench.SyncAlways}, nil
	case mode == bench.SyncAll:
		return []string{bench.SyncLazy, bench.SyncAlways, bench.SyncCluster}, nil
	case mode == bench.SyncLazy, mode == bench.SyncAlways, mode == bench.SyncCluster:
		return []string{mode}, nil
	}
	return nil, fmt.Errorf("bench: -sync %q: want always, lazy, both, cluster or all", mode)
}

// runFleet is bench -fleet: sizes and kinds are comma-separated lists.
func runFleet(ctx context.Context, out io.Writer, sizes, kinds string, modes []string, decisions, count int, dir string, jsonOut bool) error {
	procs, err := positiveList("-fleet", sizes)
	if err != nil {
		return err
	}
	var waiters []string
	for _, k := range strings.Split(kinds, ",") {
		k = strings.TrimSpace(k)
		if k != bench.WaiterKeyed && k != bench.WaiterBucket {
			return fmt.Errorf("bench: -fleet-waiters %q: want keyed, bucket or both", kinds)
		}
		waiters = append(waiters, k)
	}
	cfg := bench.FleetConfig{Dir: dir, Processes: procs, Decisions: decisions, Waiters: waiters, Modes: modes, Count: count, Out: out}
	if jsonOut {
		cfg.Out = io.Discard
	}
	reps, err := bench.Fleet(ctx, cfg)
	return writeJSONIf(out, jsonOut, reps, err)
}

// writeJSONIf writes v as indented JSON when asked and v is set, and
// returns err (or the write's error).
func writeJSONIf[T any](out io.Writer, asked bool, v []T, err error) error {
	if asked && v != nil {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(v); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// positiveList parses a comma-separated list of positive numbers.
func positiveList(flag, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bench: %s %q: want positive numbers such as 1,10,100", flag, list)
		}
		out = append(out, n)
	}
	return out, nil
}
