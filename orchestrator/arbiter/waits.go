package arbiter

import (
	"sync"
	"time"
)

// Bounds on the votes and commands that wait, Nak'd with a delay, for a
// record that does not exist yet. A waiting message holds one of the
// resolutions consumer's ack-pending slots, which every approval shares, so
// the votes of one approval (or a flood of made-up ids) must not take them
// all: past these bounds a message for a missing record is refused as
// unknown_event at once unless requests are still being handled — and, past
// the per-approval bound, even then.
const (
	maxWaitsPerEvent = 16
	maxWaitsTotal    = 256
)

// unknownWaits tracks, by stream sequence, the messages this process is
// retrying because their record does not exist yet.
type unknownWaits struct {
	mu      sync.Mutex
	byEvent map[string]int
	bySeq   map[uint64]unknownWait
}

type unknownWait struct {
	eventID string
	until   time.Time
}

func newUnknownWaits() *unknownWaits {
	return &unknownWaits{byEvent: map[string]int{}, bySeq: map[uint64]unknownWait{}}
}

// wait records that message seq waits for eventID's record until the time
// given (after which the entry is dropped: the message was handled
// elsewhere). It reports whether the approval, or the process, already has
// as many waiting messages as the bounds allow; the message is then not
// recorded.
func (w *unknownWaits) wait(seq uint64, eventID string, now, until time.Time) (eventFull, allFull bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, e := range w.bySeq {
		if now.After(e.until) {
			w.dropLocked(s)
		}
	}
	if _, ok := w.bySeq[seq]; ok {
		w.bySeq[seq] = unknownWait{eventID: eventID, until: until}
		return false, false
	}
	eventFull = w.byEvent[eventID] >= maxWaitsPerEvent
	allFull = len(w.bySeq) >= maxWaitsTotal
	if !eventFull && !allFull {
		w.bySeq[seq] = unknownWait{eventID: eventID, until: until}
		w.byEvent[eventID]++
	}
	return eventFull, allFull
}

// done forgets message seq.
func (w *unknownWaits) done(seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(seq)
}

func (w *unknownWaits) dropLocked(seq uint64) {
	e, ok := w.bySeq[seq]
	if !ok {
		return
	}
	delete(w.bySeq, seq)
	if w.byEvent[e.eventID]--; w.byEvent[e.eventID] <= 0 {
		delete(w.byEvent, e.eventID)
	}
}

// keyLocks serializes, within one process, the writes to one record: votes
// that arrive together for the same approval take turns instead of racing
// each other's compare-and-set (a flood on one approval would otherwise
// spend most of its work on conflicts). Replicas still meet at the CAS.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func newKeyLocks() *keyLocks { return &keyLocks{m: map[string]*keyLock{}} }

// lock locks key and returns its unlock.
func (k *keyLocks) lock(key string) func() {
	k.mu.Lock()
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
