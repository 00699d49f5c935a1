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
	"time"

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

With -serve-memory N it runs this binary as 'countersign serve' on a store of
its own, decides N approvals through the HTTP API, restarts it with each role
set of -serve-roles and reports its resident memory (VmRSS) once ready and
10 s later. With -reviews N it times POST /v1/reviews of a call the policy
allows, N clients and then one, beside GET /healthz and JetStream publishes on
the same server.

The summary gives the median of each figure over the repetitions, with its
range, and each budget with PASS or MISS. The defaults take about three
minutes on two cores; figures from a shared machine are noisy.
`

// cmdBench runs 'countersign bench' (see benchAbout).
func cmdBench(args []string, out io.Writer) error {
	f, err := parseBenchFlags(args, out)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if f.records != "" {
		return runRecords(ctx, out, f)
	}
	if f.serveMemory > 0 {
		return runServeMemory(ctx, out, f)
	}
	if f.reviews > 0 {
		return runReviews(ctx, out, f)
	}
	if f.fleet != "" {
		modes, err := fleetModes(f.set, f.syncMode)
		if err != nil {
			return err
		}
		return runFleet(ctx, out, f.fleet, f.fleetWaiters, modes, f.fleetDecisions, f.count, f.dir, f.jsonOut)
	}
	return runBench(ctx, out, f)
}

// benchFlags are the flags of 'countersign bench'.
type benchFlags struct {
	// set is the parsed flag set, to tell which flags were given.
	set *flag.FlagSet

	syncMode           string
	duration           time.Duration
	count              int
	concurrency        int
	arbiterConcurrency int
	pending            int
	dir                string
	jsonOut            bool
	cpuProfile         string
	fleet              string
	fleetDecisions     int
	fleetWaiters       string
	records            string
	recordsPending     int
	indexRecent        int
	recordsQueries     int
	serveMemory        int
	serveRoles         string
	serveClaim         bool
	serveKeep          bool
	serveReuse         string
	serveSeedMore      bool
	serveBinary        string
	serveSeedSync      string
	serveSettle        time.Duration
	reviews            int
}

// parseBenchFlags parses and checks the arguments of 'countersign bench'.
func parseBenchFlags(args []string, out io.Writer) (*benchFlags, error) {
	fs := newFlagSet("bench", out)
	f := &benchFlags{set: fs.FlagSet}
	fs.StringVar(&f.syncMode, "sync", bench.SyncBoth, "JetStream mode: always (fsync every write), lazy, both side by side, cluster (3 nodes in this process, R3, fsync), cluster5 (5 nodes, R3), all (lazy, always, cluster) or clusters (1, 3 and 5 nodes: always, cluster, cluster5)")
	fs.DurationVar(&f.duration, "duration", bench.DefaultDuration, "length of each timed measurement")
	fs.IntVar(&f.count, "count", bench.DefaultCount, "repetitions of every mode, each on a fresh server; figures are medians")
	fs.IntVar(&f.concurrency, "concurrency", bench.DefaultConcurrency, "concurrent agents in the throughput run")
	fs.IntVar(&f.arbiterConcurrency, "arbiter-concurrency", 0, "messages each arbiter consume loop handles at once (0: the arbiter's default)")
	fs.IntVar(&f.pending, "pending", bench.DefaultPending, "concurrent waits in the pending-capacity run (0 skips it); lazy sync unless -sync always")
	fs.StringVar(&f.dir, "dir", "", "parent directory of the stores (a temporary one by default); each store is removed afterwards")
	fs.BoolVar(&f.jsonOut, "json", false, "print the report as JSON instead of the table")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&f.fleet, "fleet", "", "measure fleets of these many agent processes instead (comma-separated, e.g. 1,10,100,1000)")
	fs.IntVar(&f.fleetDecisions, "fleet-decisions", 1000, "decisions at each fleet size, spread over its processes")
	fs.StringVar(&f.fleetWaiters, "fleet-waiters", "keyed,bucket", "waiter kinds measured at each fleet size: keyed, bucket")
	fs.StringVar(&f.records, "records", "", "measure an API replica on stored histories of these many approvals instead (comma-separated, e.g. 10000,1000000; the first is the baseline); -count restarts each")
	fs.IntVar(&f.recordsPending, "records-pending", 1000, "pending approvals among each history's records")
	fs.IntVar(&f.indexRecent, "index-recent", 0, "decided approvals the API's index keeps (0: the API's default)")
	fs.IntVar(&f.recordsQueries, "records-queries", 100, "times each listing is timed per restart")
	fs.IntVar(&f.serveMemory, "serve-memory", 0, "measure the resident memory of 'countersign serve' (this binary) on this many approvals decided through its API, then restarted, instead")
	fs.StringVar(&f.serveRoles, "serve-roles", "all,notifier,arbiter,api", "role sets restarted on the decided history in -serve-memory, each alone (all: every role)")
	fs.BoolVar(&f.serveClaim, "serve-claim", true, "in -serve-memory, claim each approved call as an agent does before it runs it")
	fs.BoolVar(&f.serveKeep, "serve-keep", false, "in -serve-memory, keep the data directory (under -dir) for a later look")
	fs.StringVar(&f.serveReuse, "serve-reuse", "", "in -serve-memory, restart serve on the history a -serve-keep run left in this directory instead of seeding one")
	fs.StringVar(&f.serveBinary, "serve-binary", "", "in -serve-memory, the countersign executable run as serve (default: this one), to measure another build on the same history")
	fs.BoolVar(&f.serveSeedMore, "serve-seed-more", false, "with -serve-reuse, first decide -serve-memory more approvals on that history and report their rate and serve's CPU per approval")
	fs.StringVar(&f.serveSeedSync, "serve-seed-sync", "", "in -serve-memory, the store's sync mode while seeding (always or lazy; restarts use serve's default)")
	fs.DurationVar(&f.serveSettle, "serve-settle", 10*time.Second, "in -serve-memory, how long after ready the resident memory is read again")
	fs.IntVar(&f.reviews, "reviews", 0, "measure POST /v1/reviews of a call the policy allows with this many clients (and one client's latency) beside GET /healthz and a JetStream publish on the same server, instead; -sync always (default) or lazy")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	if f.count < 1 || f.duration <= 0 || f.concurrency < 1 {
		return nil, fmt.Errorf("bench: -count and -concurrency must be at least 1 and -duration positive")
	}
	return f, nil
}

// runRecords is bench -records: an API replica on stored histories.
func runRecords(ctx context.Context, out io.Writer, f *benchFlags) error {
	sizes, err := positiveList("-records", f.records)
	if err != nil {
		return err
	}
	sync := f.syncMode
	if sync == bench.SyncBoth {
		sync = bench.SyncLazy // the flag's default; a history is seeded into one store
	}
	cfg := bench.RecordsConfig{Dir: f.dir, Sizes: sizes, Pending: f.recordsPending, Recent: f.indexRecent, Sync: sync,
		Queries: f.recordsQueries, Restarts: f.count, Out: out}
	if f.cpuProfile != "" {
		file, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer file.Close()
		cfg.Profile = file
	}
	if f.jsonOut {
		cfg.Out = io.Discard
	}
	reps, err := bench.Records(ctx, cfg)
	return writeJSONIf(out, f.jsonOut, reps, err)
}

// runServeMemory is bench -serve-memory: serve's resident memory on a
// decided history, measured from outside the process.
func runServeMemory(ctx context.Context, out io.Writer, f *benchFlags) error {
	bin := f.serveBinary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		bin = exe
	}
	cfg := bench.ServeMemoryConfig{Binary: bin, Dir: f.dir, Decided: f.serveMemory, Claim: f.serveClaim, Keep: f.serveKeep, Reuse: f.serveReuse, SeedMore: f.serveSeedMore,
		SeedSync: f.serveSeedSync, Settle: f.serveSettle, Out: out}
	switch f.serveSeedSync {
	case "", "always", "lazy":
	default:
		return fmt.Errorf("bench: -serve-seed-sync must be always or lazy, got %q", f.serveSeedSync)
	}
	if f.serveSettle <= 0 {
		return fmt.Errorf("bench: -serve-settle must be positive, got %s", f.serveSettle)
	}
	for _, r := range strings.Split(f.serveRoles, ",") {
		if r = strings.TrimSpace(r); r == "all" {
			r = ""
		}
		cfg.Roles = append(cfg.Roles, r)
	}
	if f.jsonOut {
		cfg.Out = io.Discard
	}
	rep, err := bench.ServeMemory(ctx, cfg)
	if rep == nil {
		return err
	}
	return writeJSONIf(out, f.jsonOut, []*bench.ServeMemoryReport{rep}, err)
}

// runReviews is bench -reviews: the allowed call's path through the API.
func runReviews(ctx context.Context, out io.Writer, f *benchFlags) error {
	sync := f.syncMode
	if sync == bench.SyncBoth {
		sync = bench.SyncAlways // the flag's default: serve's store
	}
	cfg := bench.ReviewsConfig{Dir: f.dir, Sync: sync, Duration: f.duration, Count: f.count, Clients: f.reviews, Out: out}
	if f.jsonOut {
		cfg.Out = io.Discard
	}
	if f.cpuProfile != "" {
		file, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer file.Close()
		if err := pprof.StartCPUProfile(file); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Reviews(ctx, cfg)
	if err != nil {
		return err
	}
	if f.jsonOut {
		return writeJSONIf(out, true, []*bench.ReviewsReport{rep}, nil)
	}
	a, h := rep.Allowed, rep.Health
	fmt.Fprintf(out, "\nPOST /v1/reviews, one allowed call (%s, %d repetitions; median [min–max])\n", rep.Sync, rep.Repetitions)
	fmt.Fprintf(out, "  allowed:  %6.0f/s [%.0f–%.0f] with %d clients; one client p50 %.3f ms [%.3f–%.3f], p99 %.3f ms\n",
		a.PerSec[0], a.PerSec[1], a.PerSec[2], rep.Clients, a.P50Ms[0], a.P50Ms[1], a.P50Ms[2], a.P99Ms[0])
	fmt.Fprintf(out, "  /healthz: %6.0f/s [%.0f–%.0f] with %d clients; one client p50 %.3f ms [%.3f–%.3f], p99 %.3f ms\n",
		h.PerSec[0], h.PerSec[1], h.PerSec[2], rep.Clients, h.P50Ms[0], h.P50Ms[1], h.P50Ms[2], h.P99Ms[0])
	fmt.Fprintf(out, "  JetStream publish p50 %.3f ms [%.3f–%.3f]; async publish %.0f/s [%.0f–%.0f]\n", rep.SyncPublishP50Ms[0], rep.SyncPublishP50Ms[1], rep.SyncPublishP50Ms[2],
		rep.AsyncPublishPerSec[0], rep.AsyncPublishPerSec[1], rep.AsyncPublishPerSec[2])
	return nil
}

// runBench is bench without -records or -fleet: the budgets of every sync
// mode, under a CPU profile when asked.
func runBench(ctx context.Context, out io.Writer, f *benchFlags) error {
	cfg := bench.Config{
		Dir: f.dir, Sync: f.syncMode, Duration: f.duration, Count: f.count, Concurrency: f.concurrency,
		ArbiterConcurrency: f.arbiterConcurrency, Pending: f.pending, Out: out,
	}
	if f.jsonOut {
		cfg.Out = io.Discard
	}
	if f.cpuProfile != "" {
		file, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer file.Close()
		if err := pprof.StartCPUProfile(file); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, cfg)
	if f.jsonOut && rep != nil {
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
	case mode == bench.SyncClusters:
		return []string{bench.SyncAlways, bench.SyncCluster, bench.SyncCluster5}, nil
	case mode == bench.SyncLazy, mode == bench.SyncAlways, mode == bench.SyncCluster, mode == bench.SyncCluster5:
		return []string{mode}, nil
	}
	return nil, fmt.Errorf("bench: -sync %q: want always, lazy, both, cluster, cluster5, all or clusters", mode)
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
