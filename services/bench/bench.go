package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// Sync modes.
const (
	SyncAlways = "always" // fsync every write before the ack (the production default)
	SyncLazy   = "lazy"   // JetStream's default: writes are flushed every two minutes
	SyncBoth   = "both"   // both, reported side by side
	// SyncCluster is three nodes in this process (loopback routes), every
	// stream and bucket R3, each node fsyncing every write: what a 3-node
	// production cluster does, without the network between machines.
	SyncCluster = "cluster"
	// SyncCluster5 is five such nodes, every stream and bucket still R3:
	// the streams' leaders and replicas spread over more servers.
	SyncCluster5 = "cluster5"
	SyncAll      = "all"      // lazy, always and cluster side by side
	SyncClusters = "clusters" // 1, 3 and 5 nodes side by side: always, cluster and cluster5
)

// clustered reports whether mode runs a cluster of several nodes.
func clustered(mode string) bool { return clusterNodes(mode) > 1 }

// clusterNodes is how many nodes mode runs.
func clusterNodes(mode string) int {
	switch mode {
	case SyncCluster:
		return 3
	case SyncCluster5:
		return 5
	}
	return 1
}

// Defaults. With them `countersign bench` (both modes, three repetitions,
// 100,000 pending waits) takes about three minutes on two cores.
const (
	DefaultDuration    = 3 * time.Second
	DefaultConcurrency = 64
	DefaultCount       = 3
	// DefaultPending is the number of waits the CLI holds in the
	// pending-capacity mode unless told otherwise.
	DefaultPending = 100_000
)

// Config says what to measure and where.
type Config struct {
	// Dir is where each mode's embedded server keeps its store, in a fresh
	// subdirectory that is removed afterwards (a temporary directory if empty).
	Dir string
	// Sync is "always", "lazy" or "both" (default both).
	Sync string
	// Duration of each timed measurement (default 3 s).
	Duration time.Duration
	// Count is the number of repetitions of every mode, each against a
	// fresh server; the report gives the median of each figure (default 3).
	// The repetitions of the modes alternate, so noise from elsewhere on
	// the machine falls on both.
	Count int
	// Concurrency is the number of concurrent agents in the throughput
	// mode (default 64).
	Concurrency int
	// Pending is the number of concurrent waits in the pending-capacity
	// mode; 0 skips it. It runs once, after the repetitions, against a
	// fresh server with lazy sync, or with fsync when Sync is "always".
	Pending int
	// ArbiterConcurrency is the number of messages each arbiter consume
	// loop handles at once (0: the arbiter's default).
	ArbiterConcurrency int
	// Out receives a readable table as the measurements complete (nothing
	// is printed if nil).
	Out io.Writer
}

func (c *Config) setDefaults() {
	if c.Sync == "" {
		c.Sync = SyncBoth
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

func (c *Config) validate() error {
	var errs []error
	switch c.Sync {
	case SyncAlways, SyncLazy, SyncBoth, SyncCluster, SyncCluster5, SyncAll, SyncClusters:
	default:
		errs = append(errs, fmt.Errorf("bench: Config.Sync must be always, lazy, both, cluster, cluster5, all or clusters, got %q", c.Sync))
	}
	if c.Duration < 0 {
		errs = append(errs, errors.New("bench: Config.Duration must be positive"))
	}
	if c.Count < 1 {
		errs = append(errs, errors.New("bench: Config.Count must be at least 1"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("bench: Config.Concurrency must be at least 1"))
	}
	if c.ArbiterConcurrency < 0 {
		errs = append(errs, errors.New("bench: Config.ArbiterConcurrency must not be negative"))
	}
	if c.Pending < 0 {
		errs = append(errs, errors.New("bench: Config.Pending must not be negative"))
	}
	return errors.Join(errs...)
}

// modes lists the sync modes to measure, the cheaper one first.
func (c *Config) modes() []string {
	switch c.Sync {
	case SyncAlways:
		return []string{SyncAlways}
	case SyncLazy:
		return []string{SyncLazy}
	case SyncCluster, SyncCluster5:
		return []string{c.Sync}
	case SyncClusters:
		return []string{SyncAlways, SyncCluster, SyncCluster5}
	case SyncAll:
		return []string{SyncLazy, SyncAlways, SyncCluster}
	}
	return []string{SyncLazy, SyncAlways}
}

// pendingMode is the one mode the pending-capacity measurement runs in.
func (c *Config) pendingMode() string {
	switch c.Sync {
	case SyncAlways, SyncCluster, SyncCluster5:
		return c.Sync
	case SyncClusters:
		return SyncCluster
	}
	return SyncLazy
}

// Run measures every configured mode Count times and returns the report,
// with the median of each figure. It prints to cfg.Out as it goes. If ctx
// ends or a measurement fails, it returns what it has measured so far with
// the error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	rep := &Report{
		Machine: machineInfo(),
		Settings: Settings{
			Sync: cfg.Sync, DurationSeconds: cfg.Duration.Seconds(), Count: cfg.Count, Concurrency: cfg.Concurrency,
			ArbiterConcurrency: cfg.ArbiterConcurrency,
			Pending:            cfg.Pending, RawPayloadBytes: rawPayloadBytes, ArgumentsBytes: len(benchArguments),
		},
		StartedAt: started.UTC(),
	}
	pr := newPrinter(cfg.Out)
	pr.header(rep)

	root := cfg.Dir
	if root == "" {
		tmp, err := os.MkdirTemp("", "countersign-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: temporary directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		root = tmp
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("bench: store directory: %w", err)
	}

	rep.Policy = measurePolicy(min(cfg.Duration, time.Second))
	pr.policy(rep.Policy)

	finish := func(err error) (*Report, error) {
		rep.Modes = medians(rep.Runs)
		for i := range rep.Modes {
			if rep.Pending != nil && rep.Modes[i].Sync == rep.Pending.Sync {
				rep.Modes[i].Pending = rep.Pending
			}
		}
		rep.Checks = checks(rep)
		rep.ElapsedSeconds = time.Since(started).Seconds()
		pr.summary(rep)
		return rep, err
	}
	for i := range cfg.Count {
		for _, mode := range cfg.modes() {
			if err := ctx.Err(); err != nil {
				return finish(err)
			}
			mr, err := runMode(ctx, mode, root, cfg, i+1, pr)
			if err == nil {
				// A failed repetition is reported as the error it is,
				// never as figures in the medians.
				rep.Runs = append(rep.Runs, *mr)
			}
			if err != nil {
				return finish(fmt.Errorf("bench: sync %s, repetition %d: %w", mode, i+1, err))
			}
		}
	}
	if cfg.Pending > 0 {
		if err := ctx.Err(); err != nil {
			return finish(err)
		}
		pe, err := runPending(ctx, cfg.pendingMode(), root, cfg, pr)
		rep.Pending = pe
		if err != nil {
			return finish(fmt.Errorf("bench: pending capacity, sync %s: %w", cfg.pendingMode(), err))
		}
	}
	return finish(nil)
}

// runMode starts a server in mode and measures the raw baseline, full
// cycles and decision latency against it.
func runMode(ctx context.Context, mode, root string, cfg Config, rep int, pr *printer) (*ModeReport, error) {
	pr.mode(mode, rep, cfg.Count)
	st, err := startStack(ctx, mode, root, cfg.ArbiterConcurrency)
	if err != nil {
		return nil, err
	}
	defer st.close()
	mr := &ModeReport{Sync: mode, Repetition: rep, GoProcs: runtime.GOMAXPROCS(0)}
	pr.f("%-40s%d (%d CPUs)\n", "Go processors (GOMAXPROCS)", mr.GoProcs, runtime.NumCPU())

	raw, err := measureRaw(ctx, st, cfg.Duration, pr)
	if raw != nil {
		mr.Raw = *raw
	}
	if err != nil {
		return mr, fmt.Errorf("raw baseline: %w", err)
	}

	cy, err := measureCycles(ctx, st, cfg.Duration, cfg.Concurrency, mr.Raw)
	if cy != nil {
		mr.Cycles = *cy
		pr.cycles(mode, cy)
	}
	if err != nil {
		return mr, fmt.Errorf("cycles: %w", err)
	}

	lat, err := measureLatency(ctx, st, cfg.Duration, mr.Raw.KVPutWatch.P50)
	if lat != nil {
		mr.Latency = *lat
		pr.latency(mode, lat)
	}
	if err != nil {
		return mr, fmt.Errorf("decision latency: %w", err)
	}
	return mr, nil
}

// runPending starts a server in mode and measures pending capacity on it.
func runPending(ctx context.Context, mode, root string, cfg Config, pr *printer) (*PendingReport, error) {
	pr.pendingMode(mode, cfg.Pending)
	st, err := startStack(ctx, mode, root, cfg.ArbiterConcurrency)
	if err != nil {
		return nil, err
	}
	defer st.close()
	pe, err := measurePending(ctx, st, cfg.Pending, pr)
	switch {
	case err != nil && pe != nil:
		pe.Failed = err.Error()
	case err == nil:
		pr.pending(pe)
	}
	return pe, err
}
