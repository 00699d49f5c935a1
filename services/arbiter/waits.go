package arbiter

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
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

// commits groups, within one process, the operations on one record that
// arrive while another is being applied: the first one in applies them all
// (one read, one write) instead of each racing the others' compare-and-set
// or waiting its turn. Replicas still meet at the CAS.
type commits struct {
	mu sync.Mutex
	// queued holds, per record being applied, the operations waiting for
	// the next group; a key is present while its leader runs.
	queued map[string][]*queuedOp
}

// queuedOp is one operation waiting in, or applied by, a group.
type queuedOp struct {
	msg  jetstream.Msg
	o    op
	done chan struct{}
	// Set by the group: the record before the operation, its result,
	// whether it changed what is written, and its error.
	before  contracts.Record
	res     approval.Result
	written bool
	err     error
}

func newCommits() *commits { return &commits{queued: map[string][]*queuedOp{}} }

// join queues p for key. The first operation on a key that is not being
// applied leads: it gets its group (itself) and leader true, and must call
// next until it returns nothing. Any other waits for p.done.
func (c *commits) join(key string, p *queuedOp) (group []*queuedOp, leader bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, running := c.queued[key]; running {
		c.queued[key] = append(q, p)
		return nil, false
	}
	c.queued[key] = nil
	return []*queuedOp{p}, true
}

// next returns the operations queued for key since the last group, or
// nothing, and then key is no longer being applied.
func (c *commits) next(key string) []*queuedOp {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queued[key]
	if len(q) == 0 {
		delete(c.queued, key)
		return nil
	}
	c.queued[key] = nil
	return q
}
