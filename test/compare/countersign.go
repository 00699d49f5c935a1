package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/countersign/countersign/services/bench"
)

// measureCountersign runs one repetition of the product's own bench
// (services/bench) against a fresh embedded NATS server per sync mode: the
// same flow an agent runs (review a gated call, a human's vote once the
// record is pending, the arbiter decides, the waiter wakes the agent, the
// agent claims its permit). It returns the figures of each mode.
func measureCountersign(ctx context.Context, cfg config, out io.Writer) (map[string]figures, error) {
	sync := bench.SyncAlways
	if cfg.lazy {
		sync = bench.SyncBoth
	}
	rep, err := bench.Run(ctx, bench.Config{
		Dir: filepath.Join(cfg.dir, "countersign"), Sync: sync, Duration: cfg.duration, Count: 1,
		Concurrency: cfg.agents, Out: out,
	})
	if err != nil {
		return nil, fmt.Errorf("countersign bench: %w", err)
	}
	got := map[string]figures{}
	for _, m := range rep.Runs {
		if m.Cycles.Errors > 0 || m.Latency.Errors > 0 {
			return nil, fmt.Errorf("countersign bench, sync %s: %d cycle and %d latency errors (first: %s%s)",
				m.Sync, m.Cycles.Errors, m.Latency.Errors, m.Cycles.FirstError, m.Latency.FirstError)
		}
		got[m.Sync] = figures{
			Resume:   latency{N: m.Latency.Latency.N, P50: m.Latency.Latency.P50, P99: m.Latency.Latency.P99},
			PerSec:   m.Cycles.PerSec,
			Cycles:   m.Cycles.Completed,
			Seconds:  m.Cycles.Seconds,
			WarmUpMs: m.Cycles.WarmUpMs,
			Cycle:    latency{N: m.Cycles.Latency.N, P50: m.Cycles.Latency.P50, P99: m.Cycles.Latency.P99},
		}
	}
	return got, nil
}
