package embedded

import (
	"os"
	"runtime"
	"sync"
)

// A store that syncs every write (Config.SyncAlways) blocks the thread of
// each stream write in the disk's sync for a fraction of a millisecond. The
// Go runtime hands such a thread's processor (a P of GOMAXPROCS) to other
// goroutines only when its monitor notices the blocked system call, from
// 20 µs later; until then, and while every processor is held by a sync,
// the goroutines that would move messages and start the next writes wait
// although the CPUs are idle. With as many processors as CPUs, the
// default, a process that runs the embedded server with per-write syncs
// completes fewer approval cycles than the disk allows. A few processors
// more than CPUs cover the threads blocked in syncs (see BENCHMARKS.md,
// "Processors for a store that syncs every write"). With lazy flushing,
// where writes do not block, extra processors only add scheduling and
// slow decisions down, so they are not added there.

// maxExtraProcs bounds the processors added for syncing writes: what they
// cover is the streams syncing at once, not the CPUs.
const maxExtraProcs = 8

// SyncWriteProcs is the number of processors (GOMAXPROCS) for a process
// that would otherwise run with procs and hosts a store that syncs every
// write: twice procs, with at most maxExtraProcs more.
func SyncWriteProcs(procs int) int {
	procs = max(procs, 1)
	return procs + min(procs, maxExtraProcs)
}

// raisedProcs is the raise in effect: the number set, the number before,
// and how many holders (servers that sync every write) still need it.
var raisedProcs struct {
	sync.Mutex
	holders   int
	set, prev int
}

// RaiseProcsForSyncWrites sets the process's GOMAXPROCS to SyncWriteProcs of
// the current value, unless the GOMAXPROCS environment variable sets it (the
// operator's choice is kept). It returns the number now in effect, whether
// it raised it, and a function that releases the raise: when the last
// holder has released it, the previous number comes back, unless someone
// else has set another since. A second holder while one holds it shares
// the raise instead of raising again. `countersign serve` calls it when its
// embedded server syncs every write, and so does the bench for its fsync
// stores.
func RaiseProcsForSyncWrites() (procs int, raised bool, release func()) {
	r := &raisedProcs
	r.Lock()
	defer r.Unlock()
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0), false, func() {}
	}
	if r.holders == 0 {
		r.prev = runtime.GOMAXPROCS(0)
		r.set = SyncWriteProcs(r.prev)
		runtime.GOMAXPROCS(r.set)
	}
	r.holders++
	var once sync.Once
	return runtime.GOMAXPROCS(0), true, func() {
		once.Do(func() {
			r.Lock()
			defer r.Unlock()
			r.holders--
			if r.holders == 0 && runtime.GOMAXPROCS(0) == r.set {
				runtime.GOMAXPROCS(r.prev)
			}
		})
	}
}
