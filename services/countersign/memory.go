package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// memory_limit in countersign.yaml: how serve bounds the memory the Go
// runtime holds (the heap of every role and of the embedded NATS server).
const (
	// memoryLimitAuto (the default) keeps the runtime's memory within
	// autoLimit of the live heap, re-read every memoryTick: memory freed
	// by a burst (the start-up read of a large history, a flood of
	// requests) goes back to the system instead of staying with the
	// process until the collector's next idle cycle.
	memoryLimitAuto = "auto"
	// memoryLimitOff leaves the runtime's defaults (GOGC only).
	memoryLimitOff = "off"
)

// The auto limit: a quarter above the live heap, and never under memoryFloor,
// so a small process collects no more often than GOGC=100 has it.
const (
	memoryFloor = 96 << 20
	memoryTick  = 2 * time.Second
)

// autoLimit is the auto mode's limit for a live heap of live bytes.
func autoLimit(live uint64) int64 {
	if live > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return max(memoryFloor, int64(live+live/4))
}

// memoryLimit is a parsed memory_limit: auto, off, or a fixed limit.
type memoryLimit struct {
	mode  string // memoryLimitAuto, memoryLimitOff, or "" for fixed
	bytes int64  // the fixed limit
}

// parseMemoryLimit reads memory_limit: "" or auto, off, or a size in bytes
// with an optional unit (KiB, MiB, GiB, TiB, or B), as GOMEMLIMIT takes it.
func parseMemoryLimit(s string) (memoryLimit, error) {
	switch s {
	case "", memoryLimitAuto:
		return memoryLimit{mode: memoryLimitAuto}, nil
	case memoryLimitOff:
		return memoryLimit{mode: memoryLimitOff}, nil
	}
	n, unit := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, unit = v, u.mult
			break
		}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil || v <= 0 || v > math.MaxInt64/unit {
		return memoryLimit{}, fmt.Errorf("config: memory_limit must be auto, off or a size such as 512MiB or 2GiB, got %q", s)
	}
	if v*unit < 32<<20 {
		return memoryLimit{}, fmt.Errorf("config: memory_limit %q is under 32MiB: serve would do little but collect garbage", s)
	}
	return memoryLimit{bytes: v * unit}, nil
}

// apply applies the limit until ctx ends or stop is called.
func (m memoryLimit) apply(ctx context.Context, log *slog.Logger) (stop func()) {
	ctx, stop = context.WithCancel(ctx)
	m.start(ctx, log)
	return stop
}

// start applies the limit for the life of ctx and says which applies.
// GOMEMLIMIT in the environment, the runtime's own setting, wins over
// memory_limit.
func (m memoryLimit) start(ctx context.Context, log *slog.Logger) string {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info("memory limit from GOMEMLIMIT; memory_limit is not applied", "gomemlimit", env)
		return "GOMEMLIMIT"
	}
	switch m.mode {
	case memoryLimitOff:
		return memoryLimitOff
	case memoryLimitAuto:
		f := &heapFollower{read: liveHeap, set: debug.SetMemoryLimit}
		f.step()
		go f.run(ctx, time.NewTicker(memoryTick))
		return memoryLimitAuto
	default:
		debug.SetMemoryLimit(m.bytes)
		return strconv.FormatInt(m.bytes, 10)
	}
}

// liveHeap is the live heap the last collection found.
func liveHeap() (uint64, bool) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return sample[0].Value.Uint64(), true
}

// heapFollower keeps the soft memory limit at autoLimit of the live heap.
type heapFollower struct {
	read    func() (uint64, bool)
	set     func(int64) int64
	current int64
}

// step sets the limit for the live heap now, if it changed.
func (f *heapFollower) step() {
	live, ok := f.read()
	if !ok {
		return
	}
	if limit := autoLimit(live); limit != f.current {
		f.set(limit)
		f.current = limit
	}
}

// run steps on every tick until ctx ends, then lifts the limit.
func (f *heapFollower) run(ctx context.Context, tick *time.Ticker) {
	defer tick.Stop()
	defer f.set(math.MaxInt64)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f.step()
		}
	}
}
