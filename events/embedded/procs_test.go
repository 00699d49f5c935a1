package embedded

import (
	"runtime"
	"testing"
)

func TestSyncWriteProcs(t *testing.T) {
	for _, c := range []struct{ procs, want int }{
		{0, 2}, {1, 2}, {2, 4}, {4, 8}, {8, 16}, {12, 20}, {64, 72},
	} {
		if got := SyncWriteProcs(c.procs); got != c.want {
			t.Errorf("SyncWriteProcs(%d) = %d, want %d", c.procs, got, c.want)
		}
	}
}

// withProcs runs the test with GOMAXPROCS at n and puts back the value it
// found afterwards.
func withProcs(t *testing.T, n int) {
	t.Helper()
	prev := runtime.GOMAXPROCS(n)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}

func TestRaiseProcsForSyncWritesAndRestore(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	withProcs(t, 3)
	procs, raised, restore := RaiseProcsForSyncWrites()
	if procs != 6 || !raised || runtime.GOMAXPROCS(0) != 6 {
		t.Fatalf("raised to %d (%v), GOMAXPROCS now %d; want 6, true and 6", procs, raised, runtime.GOMAXPROCS(0))
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("after restore GOMAXPROCS = %d, want 3", got)
	}
	restore() // a second call changes nothing
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("after a second restore GOMAXPROCS = %d, want 3", got)
	}
}

func TestRestoreKeepsAValueSetSince(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	withProcs(t, 2)
	_, _, restore := RaiseProcsForSyncWrites()
	runtime.GOMAXPROCS(5) // someone else's choice, made after the raise
	restore()
	if got := runtime.GOMAXPROCS(0); got != 5 {
		t.Fatalf("restore overwrote a later setting: GOMAXPROCS = %d, want 5", got)
	}
}

func TestRaiseProcsKeepsTheOperatorsSetting(t *testing.T) {
	t.Setenv("GOMAXPROCS", "3")
	withProcs(t, 3)
	procs, raised, restore := RaiseProcsForSyncWrites()
	if procs != 3 || raised || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("with GOMAXPROCS=3 in the environment: %d (raised %v), GOMAXPROCS now %d; want 3, false and 3", procs, raised, runtime.GOMAXPROCS(0))
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("after restore GOMAXPROCS = %d, want 3", got)
	}
}

func TestTwoHoldersShareOneRaise(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	withProcs(t, 2)
	first, _, releaseFirst := RaiseProcsForSyncWrites()
	second, raised, releaseSecond := RaiseProcsForSyncWrites()
	if first != 4 || second != 4 || !raised || runtime.GOMAXPROCS(0) != 4 {
		t.Fatalf("two holders: %d and %d (raised %v), GOMAXPROCS %d; want 4, 4, true and 4 (one raise, not two)",
			first, second, raised, runtime.GOMAXPROCS(0))
	}
	releaseFirst()
	if got := runtime.GOMAXPROCS(0); got != 4 {
		t.Fatalf("after the first release GOMAXPROCS = %d, want 4 while the second holds it", got)
	}
	releaseFirst() // released once only
	releaseSecond()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Fatalf("after both releases GOMAXPROCS = %d, want 2", got)
	}
}
