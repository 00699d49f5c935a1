package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
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
// never under the floor.
func TestAutoMemoryLimitFollowsTheLiveHeap(t *testing.T) {
	live := uint64(10 << 20)
	var set []int64
	f := &heapFollower{read: func() (uint64, bool) { return live, true }, set: func(v int64) int64 { set = append(set, v); return 0 }}
	f.step()
	live = 400 << 20 // a start-up read of a large history
	f.step()
	f.step()        // unchanged: not set again
	live = 80 << 20 // the burst is over
	f.step()
	want := []int64{memoryFloor, 500 << 20, 100 << 20}
	if len(set) != len(want) {
		t.Fatalf("limits set %v, want %v", set, want)
	}
	for i := range want {
		if set[i] != want[i] {
			t.Fatalf("limits set %v, want %v", set, want)
		}
	}
	if got := autoLimit(math.MaxUint64); got != math.MaxInt64 {
		t.Fatalf("autoLimit of an enormous heap = %d, want no limit", got)
	}
}

func TestGOMEMLIMITWinsOverMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "3GiB")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if got := (memoryLimit{bytes: 64 << 20}).start(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); got != "GOMEMLIMIT" {
		t.Fatalf("applied %q with GOMEMLIMIT set, want GOMEMLIMIT's", got)
	}
}
