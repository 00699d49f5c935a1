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
	// requests) goes back to the system once the burst is over instead of
	// staying with the process until the collector's next idle cycle.
	memoryLimitAuto = "auto"
	// memoryLimitOff leaves the runtime's defaults (GOGC only).
	memoryLimitOff = "off"
)

// The auto limit sits above the memory the runtime holds besides the
// heap's objects and free pages, by the heap a collection may let grow:
//   - busy (more than busyAllocs, or a 32nd of the live heap, allocated
//     in the last tick): a quarter above the live heap, and at least
//     memoryFloor of heap, so that a small process collects no more often
//     than GOGC=100 has it and a large one allocates a quarter of its live
//     heap between two collections;
//   - quiet: a 16th above the live heap, at least quietRoom: a quiet
//     process collects its little garbage and keeps close to what it uses.
//
// On the first quiet tick after a busy spell the garbage and free pages
// the spell left go back to the system at once (a collection and a
// scavenge) where they are worth it (at least releaseWorth, or an eighth
// of the live heap), at most once every releaseEvery.
const (
	memoryFloor  = 96 << 20
	quietRoom    = 8 << 20
	memoryTick   = 2 * time.Second
	busyAllocs   = 4 << 20
	releaseWorth = 16 << 20
	releaseEvery = time.Minute
)

// runtimeMemory is what the auto limit is computed from: the live heap the
// last collection found, and the memory the soft limit counts that is not
// heap objects or free heap pages (goroutine stacks, the collector's
// metadata, fragmentation inside spans, the runtime's other structures).
type runtimeMemory struct {
	live     uint64
	overhead uint64
	// spare is the heap's garbage and free pages not yet released: what a
	// collection and a scavenge would give back.
	spare uint64
	// allocated counts every byte allocated on the heap since the start.
	allocated uint64
}

// autoLimit is the auto mode's limit for m. The runtime compares its soft
// limit with all the memory it holds, not the heap alone: a limit of
// 1.25 × the live heap alone sits under what a large heap's process holds
// anyway, and the collector then runs without pause (capped at half the
// CPU). The overhead is added so that only the heap's growth is bounded.
func autoLimit(m runtimeMemory, busy bool) int64 {
	if m.live > math.MaxInt64/4 || m.overhead > math.MaxInt64/4 {
		return math.MaxInt64
	}
	heap := int64(m.live) + max(quietRoom, int64(m.live/16))
	if busy {
		heap = max(memoryFloor, int64(m.live+m.live/4))
	}
	return int64(m.overhead) + heap
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
		f := &heapFollower{read: readRuntimeMemory, set: debug.SetMemoryLimit, release: debug.FreeOSMemory, now: time.Now}
		f.step()
		go f.run(ctx, time.NewTicker(memoryTick))
		return memoryLimitAuto
	default:
		debug.SetMemoryLimit(m.bytes)
		return strconv.FormatInt(m.bytes, 10)
	}
}

// readRuntimeMemory reads the live heap and the overhead from the runtime.
func readRuntimeMemory() (runtimeMemory, bool) {
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	metrics.Read(samples)
	var v [6]uint64
	for i, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return runtimeMemory{}, false
		}
		v[i] = s.Value.Uint64()
	}
	live, total, released, free, objects, allocated := v[0], v[1], v[2], v[3], v[4], v[5]
	return runtimeMemory{
		live:      live,
		overhead:  total - min(total, released+free+objects),
		spare:     free + objects - min(free+objects, live),
		allocated: allocated,
	}, true
}

// heapFollower keeps the soft memory limit at autoLimit of the runtime's
// memory, busy or quiet, and gives a busy spell's spare memory back once it
// is over.
type heapFollower struct {
	read    func() (runtimeMemory, bool)
	set     func(int64) int64
	release func() // a collection and a scavenge: debug.FreeOSMemory
	now     func() time.Time

	current     int64
	allocated   uint64
	owed        bool // a busy spell's spare memory is still to give back
	lastRelease time.Time
}

// step sets the limit for the runtime's memory now, if it changed, after
// giving back what a busy spell that just ended left.
func (f *heapFollower) step() {
	m, ok := f.read()
	if !ok {
		return
	}
	spell := m.allocated - min(m.allocated, f.allocated)
	f.allocated = m.allocated
	busy := spell > max(busyAllocs, m.live/32)
	switch {
	case busy:
		f.owed = true
	case f.owed && m.spare < max(releaseWorth, m.live/8):
		f.owed = false // little to give back
	case f.owed && f.now().Sub(f.lastRelease) >= releaseEvery:
		f.release()
		f.owed, f.lastRelease = false, f.now()
		if again, ok := f.read(); ok {
			m = again
			f.allocated = m.allocated
		}
	}
	if limit := autoLimit(m, busy); limit != f.current {
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
