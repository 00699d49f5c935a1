// Command compare measures Countersign and a Temporal dev server side by
// side, in one run on one machine, with the same workload: an agent starts
// something that waits for a human's approval, the human approves, the
// agent resumes.
//
// It installs the Temporal CLI (a Go module) with `go install` into a
// scratch directory once, and for each repetition, with the order of the
// two systems alternating between repetitions:
//
//   - Countersign: one repetition of the product's bench (services/bench),
//     in process, against a fresh embedded NATS server with fsync on every
//     write, and again with JetStream's lazy flush unless -lazy=false;
//   - Temporal: a fresh `temporal server start-dev` on free loopback ports
//     with its state in a SQLite file (by default in WAL mode with
//     synchronous=FULL: every commit is fsynced, like Countersign's default),
//     a worker and a client in this process running a workflow that waits
//     for an approve signal.
//
// Two figures per system: resume latency, one approval at a time, from the
// moment the vote or signal is sent until the agent's code runs again
// (Countersign: Review returns; Temporal: the workflow code after its
// signal wait, the earliest point it can be seen), p50 and p99; and burst
// throughput, concurrent agents each running full cycles (start, wait,
// approve, resumed, completed), in cycles per second. Countersign's bench
// counts the cycles that complete within -duration from the moment the
// agents start; Temporal's window (-temporal-duration, longer, since its
// cycles take seconds in a burst) opens once every agent has completed a
// cycle, so no agent starts cold in it. Both choices favour Temporal. The
// table gives the median over the repetitions with its range, and the
// ratios taken within each repetition.
//
// A failed repetition is reported as failed and left out of the medians.
// Ctrl-C stops the run and the dev server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is the run's settings.
type config struct {
	dir           string
	temporal      string
	count         int
	duration      time.Duration
	temporalBurst time.Duration
	agents        int
	resumeCycles  int
	lazy, verbose bool
	// pragmas open the dev server's SQLite file.
	pragmas []string
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.StringVar(&c.dir, "dir", filepath.Join(os.TempDir(), "countersign-compare"), "scratch directory: the Temporal CLI is cached here, stores are made and removed here")
	fs.StringVar(&c.temporal, "temporal-version", "v1.5.1", "version of github.com/temporalio/cli to install")
	fs.IntVar(&c.count, "count", 3, "repetitions; each on fresh servers, figures are medians")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "Countersign's burst window and each timed step of its bench")
	fs.DurationVar(&c.temporalBurst, "temporal-duration", 10*time.Second, "Temporal's burst window: its cycles take seconds under a burst, so a short window would hold one per agent")
	fs.IntVar(&c.agents, "agents", 64, "concurrent agents in the burst")
	fs.IntVar(&c.resumeCycles, "resume-cycles", 100, "sequential approvals timed on Temporal per repetition (Countersign's bench times as many as fit in -duration)")
	pragmas := fs.String("temporal-sqlite", "journal_mode=WAL,synchronous=FULL", "pragmas of the dev server's SQLite file, comma-separated (the default fsyncs the log at every commit; SQLite's own default, a rollback journal, is slower)")
	fs.BoolVar(&c.lazy, "lazy", true, "also measure Countersign with JetStream's lazy flush")
	fs.BoolVar(&c.verbose, "v", false, "print the Countersign bench's own report too")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *pragmas != "" {
		c.pragmas = strings.Split(*pragmas, ",")
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if c.count < 1 || c.agents < 1 || c.resumeCycles < 1 {
		errs = append(errs, errors.New("-count, -agents and -resume-cycles must be at least 1"))
	}
	if c.duration <= 0 || c.temporalBurst <= 0 {
		errs = append(errs, errors.New("-duration and -temporal-duration must be positive"))
	}
	return c, errors.Join(errs...)
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// repetition is one repetition's figures, or why it failed.
type repetition struct {
	countersign map[string]figures
	temporal    figures
	err         error
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	// Stores a killed run left behind, and this run's.
	stores := filepath.Join(cfg.dir, "countersign")
	_ = os.RemoveAll(stores)
	defer os.RemoveAll(stores)
	binary, err := installTemporal(ctx, cfg.dir, cfg.temporal)
	if err != nil {
		return err
	}
	var benchOut io.Writer = io.Discard
	if cfg.verbose {
		benchOut = out
	}
	started := time.Now()
	var reps []repetition
	for i := range cfg.count {
		r := repetition{}
		steps := []func() error{
			func() (err error) { r.countersign, err = measureCountersign(ctx, cfg, benchOut); return err },
			func() (err error) { r.temporal, err = measureTemporal(ctx, cfg, binary, i+1); return err },
		}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, step := range steps {
			if r.err = step(); r.err != nil {
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		printRepetition(out, i+1, cfg.count, r)
		reps = append(reps, r)
	}
	return printTable(out, cfg, reps, time.Since(started))
}

// measureTemporal runs one repetition against a fresh dev server, which it
// stops (and whose store it removes) before returning.
func measureTemporal(ctx context.Context, cfg config, binary string, rep int) (figures, error) {
	dir := filepath.Join(cfg.dir, fmt.Sprintf("temporal-run-%d", rep))
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return figures{}, err
	}
	defer os.RemoveAll(dir)
	srv, err := startTemporal(ctx, binary, dir, cfg.pragmas)
	if err != nil {
		return figures{}, err
	}
	defer srv.stop()
	agents, err := startAgents(ctx, srv.addr)
	if err != nil {
		return figures{}, err
	}
	defer agents.close()
	prefix := fmt.Sprintf("rep%d-%d", rep, time.Now().UnixNano())
	resume, result, err := measureTemporalResume(ctx, agents, prefix+"-lat", cfg.resumeCycles)
	if err != nil {
		return figures{}, fmt.Errorf("temporal resume latency: %w", err)
	}
	f, err := measureTemporalBurst(ctx, agents, prefix+"-cyc", cfg.temporalBurst, cfg.agents)
	if err != nil {
		return figures{}, fmt.Errorf("temporal burst: %w", err)
	}
	f.Resume, f.Result = resume, result
	return f, nil
}
