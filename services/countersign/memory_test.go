package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

func TestParseMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want memoryLimit
	}{
		{"", memoryLimit{mode: memoryLimitAuto}},
		{"auto", memoryLimit{mode: memoryLimitAuto}},
		{"off", memoryLimit{mode: memoryLimitOff}},
		{"512MiB", memoryLimit{bytes: 512 << 20}},
		{"2GiB", memoryLimit{bytes: 2 << 30}},
		{"65536KiB", memoryLimit{bytes: 64 << 20}},
		{"134217728", memoryLimit{bytes: 128 << 20}},
		{"134217728B", memoryLimit{bytes: 128 << 20}},
	} {
		got, err := parseMemoryLimit(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseMemoryLimit(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"lots", "-1MiB", "0", "1.5GiB", "512MB", "16MiB", "9999999999TiB", "Auto"} {
		if _, err := parseMemoryLimit(bad); err == nil || !strings.Contains(err.Error(), "memory_limit") {
			t.Errorf("parseMemoryLimit(%q): err %v, want a memory_limit error", bad, err)
		}
	}
}

func TestServeConfigRefusesABadMemoryLimit(t *testing.T) {
	cfg := serveConfig{fileConfig: defaultConfig()}
	cfg.MemoryLimit = "plenty"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), `memory_limit must be auto, off or a size`) {
		t.Fatalf("validate: %v, want the memory_limit error", err)
	}
	cfg.MemoryLimit = "1GiB"
	if err := cfg.validate(); err != nil || cfg.memory.bytes != 1<<30 {
		t.Fatalf("validate: %v, memory %+v; want 1GiB", err, cfg.memory)
	}
}

// The auto limit follows the live heap both ways: up when it grows, back
// down after a burst, so memory freed by the burst goes back to the system;
// a quarter of the live heap (never under the floor) to allocate while
// busy, a 16th while quiet; always above the memory the runtime holds
// besides the heap's objects.
func TestAutoMemoryLimitFollowsTheLiveHeap(t *testing.T) {
	m := runtimeMemory{live: 10 << 20, overhead: 20 << 20}
	var set []int64
	f := &heapFollower{
		read:    func() (runtimeMemory, bool) { return m, true },
		set:     func(v int64) int64 { set = append(set, v); return 0 },
		release: func() {},
		now:     time.Now,
	}
	f.step()                                                                    // quiet
	m = runtimeMemory{live: 400 << 20, overhead: 150 << 20, allocated: 1 << 30} // a start-up read of a large history
	f.step()
	m.allocated += 100 << 20
	f.step()                                                                      // still busy, unchanged: not set again
	m = runtimeMemory{live: 60 << 20, overhead: 30 << 20, allocated: m.allocated} // the burst is over
	f.step()
	m.allocated += 300 << 20 // busy on a small heap: the floor
	f.step()
	want := []int64{20<<20 + 10<<20 + quietRoom, 150<<20 + 500<<20, 30<<20 + 60<<20 + quietRoom, 30<<20 + memoryFloor}
	if len(set) != len(want) {
		t.Fatalf("limits set %v, want %v", set, want)
	}
	for i := range want {
		if set[i] != want[i] {
			t.Fatalf("limits set %v, want %v", set, want)
		}
	}
	if got := autoLimit(runtimeMemory{live: math.MaxUint64}, true); got != math.MaxInt64 {
		t.Fatalf("autoLimit of an enormous heap = %d, want no limit", got)
	}
}

// A busy spell's garbage goes back to the system on the first quiet tick
// after it, once, and not more than once a minute; a quiet process, or a
// spell that left little, is left alone.
func TestAutoMemoryLimitGivesBackABusySpellsMemory(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	m := runtimeMemory{live: 200 << 20, overhead: 50 << 20, spare: 5 << 20}
	released := 0
	f := &heapFollower{
		read:    func() (runtimeMemory, bool) { return m, true },
		set:     func(int64) int64 { return 0 },
		release: func() { released++; m.spare = 1 << 20 },
		now:     func() time.Time { return now },
	}
	tick := func(allocated, spare uint64) {
		t.Helper()
		m.allocated += allocated
		m.spare = spare
		now = now.Add(memoryTick)
		f.step()
	}
	tick(0, 5<<20) // the first reading: everything allocated since the start
	tick(0, 5<<20)
	if released != 0 {
		t.Fatalf("a quiet process was given back to the system %d times", released)
	}
	tick(300<<20, 80<<20) // a flood of requests
	tick(300<<20, 90<<20)
	if released != 0 {
		t.Fatalf("memory given back %d times while busy", released)
	}
	tick(1<<20, 90<<20) // quiet again
	if released != 1 {
		t.Fatalf("memory given back %d times after the spell, want once", released)
	}
	tick(1<<20, 90<<20)
	tick(0, 90<<20)
	if released != 1 {
		t.Fatalf("memory given back %d times while quiet, want once in all", released)
	}
	tick(300<<20, 90<<20) // another spell, within the minute
	tick(0, 90<<20)
	if released != 1 {
		t.Fatalf("memory given back again %s after the last time, want at most once a minute", memoryTick*4)
	}
	for range 30 {
		tick(0, 90<<20)
	}
	if released != 2 {
		t.Fatalf("memory given back %d times once the minute passed, want twice in all", released)
	}
	tick(300<<20, 20<<20) // a spell that left less than an eighth of the live heap
	tick(0, 20<<20)
	for range 30 {
		tick(0, 20<<20)
	}
	if released != 2 {
		t.Fatalf("memory given back %d times after a spell that left little, want still twice", released)
	}
}

// keep holds the test's live heap where the compiler cannot drop it.
var keep [][]*[8]uint64

// With a live heap whose spans are half empty (fragmentation the soft
// limit counts but the live heap does not), the auto limit of a busy
// process leaves the collector about a quarter of the live heap to allocate before its next
// cycle; a limit of 1.25 × the live heap alone sits under what the runtime
// holds, and its heap goal is the live heap itself: the collector would
// run without pause.
func TestAutoMemoryLimitLetsALargeFragmentedHeapAllocate(t *testing.T) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const objects = 2 << 20 // 64 B each: 128 MiB, of which half is kept
	all := make([]*[8]uint64, objects)
	for i := range all {
		all[i] = new([8]uint64)
	}
	kept := make([]*[8]uint64, 0, objects/2)
	for i := 0; i < objects; i += 2 {
		kept = append(kept, all[i])
	}
	all = nil
	keep = [][]*[8]uint64{kept}
	defer func() { keep = nil }()
	runtime.GC()
	m, ok := readRuntimeMemory()
	if !ok {
		t.Fatal("the runtime's memory metrics are not readable")
	}
	if m.live < 60<<20 || m.overhead < 40<<20 {
		t.Fatalf("live heap %d MiB, overhead %d MiB: the test did not build the heap it means to", m.live>>20, m.overhead>>20)
	}
	if old := max(memoryFloor, int64(m.live+m.live/4)); old > int64(m.live+m.overhead) {
		t.Fatalf("a limit of 1.25 × the live heap alone (%d MiB) would not be under what the runtime holds (%d MiB): the test shows nothing", old>>20, (m.live+m.overhead)>>20)
	}
	debug.SetMemoryLimit(autoLimit(m, true))
	if goal := heapGoal(); goal < m.live+m.live/5 {
		t.Fatalf("under the auto limit the collector's heap goal is %d MiB for a live heap of %d MiB: it collects again before a fifth of the live heap is allocated", goal>>20, m.live>>20)
	}
}

// heapGoal is the heap size at which the runtime ends its next collection
// cycle, after the limits in force now.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestGOMEMLIMITWinsOverMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "3GiB")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if got := (memoryLimit{bytes: 64 << 20}).start(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); got != "GOMEMLIMIT" {
		t.Fatalf("applied %q with GOMEMLIMIT set, want GOMEMLIMIT's", got)
	}
}
