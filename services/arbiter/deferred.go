package arbiter

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// This file defers a new approval's timers. Most approvals that people or
// automated voters decide quickly are decided before their first timer
// could matter; writing the expiry schedule at once and withdrawing it a
// moment later costs two synced writes (and their removals) that change
// nothing. With Config.DeferTimers set, the arbiter writes the timers of a
// new record that long after creating it, and only if the record is still
// pending then; a record decided before that has none written and none to
// withdraw.
//
// Nothing is lost if the arbiter stops in between: the request message is
// acknowledged only once its timers are written (or found unneeded), so a
// request whose timers were deferred and never written is delivered again,
// to this or another replica, which finds the record and schedules them
// (existing). Deadlines are absolute: a schedule written late fires at the
// same moment. A record whose first timer falls due within the delay and
// deferSlack is scheduled at once, so that even a request delivered again
// only after its ack wait (an arbiter killed) is scheduled before any of
// its timers is due.

// DefaultDeferTimers is the delay `countersign serve` gives
// Config.DeferTimers: longer than most automated decisions take, short
// beside any deadline a person is given.
const DefaultDeferTimers = 2 * time.Second

// deferSlack is what a deferred timer must keep, beyond the delay, before
// it is due: the requests consumer's ack wait (30 s, events.Consume's
// default) and a few seconds to handle the request again.
const deferSlack = 35 * time.Second

// maxDeferred bounds the records whose timers wait at once; past it they
// are scheduled at once.
const maxDeferred = 10000

// deferredTimers are the records whose timers wait, by event id.
type deferredTimers struct {
	mu sync.Mutex
	m  map[string]*deferredEntry
}

type deferredEntry struct {
	mu sync.Mutex
	// decided is set when the record was decided before its timers were
	// written; written once they were; done once the request was
	// acknowledged or handed back.
	decided, written, done bool
	// unwatch ends the watch of the arbiter's context (see deferTimers).
	unwatch func() bool
}

func newDeferredTimers() *deferredTimers { return &deferredTimers{m: map[string]*deferredEntry{}} }

// deferTimers takes over msg (the request of rec, just created) and writes
// rec's timers after the delay, unless rec is decided first. It reports
// false, leaving msg to its handler, when the timers are due too soon or
// too many wait already.
func (a *Arbiter) deferTimers(ctx context.Context, msg jetstream.Msg, rec contracts.Record) bool {
	d := a.cfg.DeferTimers
	if d <= 0 || !a.firstTimerAfter(rec, a.cfg.Now().Add(d+deferSlack)) {
		return false
	}
	id := rec.Request.EventID
	e := &deferredEntry{}
	a.deferred.mu.Lock()
	if len(a.deferred.m) >= maxDeferred || a.deferred.m[id] != nil {
		a.deferred.mu.Unlock()
		return false
	}
	a.deferred.m[id] = e
	e.mu.Lock() // the timer's function waits until the watch is set
	t := time.AfterFunc(d, func() { a.writeDeferred(ctx, msg, rec, e) })
	// A stopping arbiter hands the request back at once, so that another
	// replica (or this one, restarted) schedules its timers.
	e.unwatch = context.AfterFunc(ctx, func() {
		if t.Stop() {
			a.handBack(msg, id, e)
		}
	})
	e.mu.Unlock()
	a.deferred.mu.Unlock()
	return true
}

// handBack returns a deferred request to the stream for redelivery.
func (a *Arbiter) handBack(msg jetstream.Msg, id string, e *deferredEntry) {
	e.mu.Lock()
	if !e.done {
		e.done = true
		_ = msg.Nak()
	}
	e.mu.Unlock()
	a.deferred.mu.Lock()
	delete(a.deferred.m, id)
	a.deferred.mu.Unlock()
}

// firstTimerAfter reports whether every timer of rec falls due after t.
func (a *Arbiter) firstTimerAfter(rec contracts.Record, t time.Time) bool {
	if !rec.ExpiresAt.After(t) {
		return false
	}
	for _, p := range timerPoints(&rec.Request, rec.ExpiresAt) {
		if !p.At.After(t) {
			return false
		}
	}
	return true
}

// writeDeferred writes the timers of rec unless it was decided meanwhile,
// then acknowledges its request. When the arbiter is stopping, or the
// write fails, the request is delivered again and scheduled then.
func (a *Arbiter) writeDeferred(ctx context.Context, msg jetstream.Msg, rec contracts.Record, e *deferredEntry) {
	id := rec.Request.EventID
	defer func() {
		a.deferred.mu.Lock()
		delete(a.deferred.m, id)
		a.deferred.mu.Unlock()
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unwatch() // the context's list of watchers would otherwise keep one per request
	if e.done {
		return
	}
	e.done = true
	if ctx.Err() != nil {
		_ = msg.Nak()
		return
	}
	if !e.decided && a.stillPending(ctx, id) {
		if err := a.scheduleExpiry(ctx, rec); err != nil {
			a.cfg.Logger.Warn("writing a deferred timer failed; the request comes back to schedule it", "event_id", id, "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		if err := a.scheduleTimers(ctx, rec); err != nil {
			a.cfg.Logger.Warn("writing a deferred timer failed; the request comes back to schedule it", "event_id", id, "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		e.written = true
	}
	if err := msg.Ack(); err != nil {
		a.cfg.Logger.Debug("ack of a request whose timers were deferred", "event_id", id, "err", err)
	}
}

// stillPending reports whether the record of id is pending: from the
// record this arbiter wrote last when it is decided, else the bucket's.
// A record that cannot be read counts as pending (its timers are written).
func (a *Arbiter) stillPending(ctx context.Context, id string) bool {
	if rec, _, ok := a.records.get(id); ok && rec.Terminal() {
		return false
	}
	entry, err := a.kv.Get(ctx, id)
	if err != nil {
		return true
	}
	var cur contracts.Record
	if err := contracts.DecodeRecord(id, entry.Value(), &cur); err != nil {
		return true
	}
	return !cur.Terminal()
}

// decidedBeforeTimers tells a deferred record's wait that the record is
// decided, and reports whether its timers were not written (nothing to
// withdraw). A record whose timers are being written waits for them, so
// that a withdrawal always comes after the schedule it withdraws.
func (a *Arbiter) decidedBeforeTimers(id string) bool {
	a.deferred.mu.Lock()
	e := a.deferred.m[id]
	a.deferred.mu.Unlock()
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.written {
		return false
	}
	e.decided = true
	return true
}
