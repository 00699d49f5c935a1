package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Sync modes.
const (
	SyncAlways = "always" // fsync every write before the ack (the production default)
	SyncLazy   = "lazy"   // JetStream's default: writes are flushed every two minutes
	SyncBoth   = "both"   // both, reported side by side
)

// Defaults.
const (
	DefaultDuration    = 5 * time.Second
	DefaultConcurrency = 64
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
	// Duration of each timed measurement (default 5 s).
	Duration time.Duration
	// Concurrency is the number of concurrent agents in the throughput
	// mode (default 64).
	Concurrency int
	// Pending is the number of concurrent waits in the pending-capacity
	// mode; 0 skips it. The mode runs with lazy sync, or with fsync when
	// Sync is "always".
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
	if c.Out == nil {
		c.Out = io.Discard
	}
}

func (c *Config) validate() error {
	var errs []error
	switch c.Sync {
	case SyncAlways, SyncLazy, SyncBoth:
	default:
		errs = append(errs, fmt.Errorf("bench: Config.Sync must be always, lazy or both, got %q", c.Sync))
	}
	if c.Duration < 0 {
		errs = append(errs, errors.New("bench: Config.Duration must be positive"))
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
	}
	return []string{SyncLazy, SyncAlways}
}

// pendingMode is the one mode the pending-capacity measurement runs in.
func (c *Config) pendingMode() string {
	if c.Sync == SyncAlways {
		return SyncAlways
	}
	return SyncLazy
}

// Run measures every configured mode and returns the report. It prints to
// cfg.Out as it goes. If ctx ends or a measurement fails, it returns what it
// has measured so far with the error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	rep := &Report{
		Machine: machineInfo(),
		Settings: Settings{
			Sync: cfg.Sync, DurationSeconds: cfg.Duration.Seconds(), Concurrency: cfg.Concurrency,
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
		rep.Checks = checks(rep)
		rep.ElapsedSeconds = time.Since(started).Seconds()
		pr.summary(rep)
		return rep, err
	}
	for _, mode := range cfg.modes() {
		if err := ctx.Err(); err != nil {
			return finish(err)
		}
		pending := 0
		if mode == cfg.pendingMode() {
			pending = cfg.Pending
		}
		mr, err := runMode(ctx, mode, root, cfg, pending, pr)
		if mr != nil {
			rep.Modes = append(rep.Modes, *mr)
		}
		if err != nil {
			return finish(fmt.Errorf("bench: sync %s: %w", mode, err))
		}
	}
	return finish(nil)
}

// runMode starts a server in mode and measures everything against it.
func runMode(ctx context.Context, mode, root string, cfg Config, pending int, pr *printer) (*ModeReport, error) {
	pr.mode(mode)
	st, err := startStack(ctx, mode, root, cfg.ArbiterConcurrency)
	if err != nil {
		return nil, err
	}
	defer st.close()
	mr := &ModeReport{Sync: mode}

	raw, err := measureRaw(ctx, st, cfg.Duration, pr)
	if raw != nil {
		mr.Raw = *raw
	}
	if err != nil {
		return mr, fmt.Errorf("raw baseline: %w", err)
	}

	cy, err := measureCycles(ctx, st, cfg.Duration, cfg.Concurrency, mr.Raw.FloorCyclesPerSec)
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

	if pending > 0 {
		pe, err := measurePending(ctx, st, pending, pr)
		if pe != nil {
			mr.Pending = pe
			pr.pending(pe)
		}
		if err != nil {
			return mr, fmt.Errorf("pending capacity: %w", err)
		}
	}
	return mr, nil
}
