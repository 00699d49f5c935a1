package orchestrator

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MissAnnouncementsForTest ends a keyed waiter's subscriptions to key's
// announcements while its waits stay, as if the connection had dropped
// every announcement of key.
func (w *Waiter) MissAnnouncementsForTest(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ks := w.subs[key]; ks != nil {
		ks.unsubscribe()
	}
}

// OverflowForTest is what the waiter does when its announcements channel
// was full: an announcement may have been dropped.
func (w *Waiter) OverflowForTest() { w.ann.overflowed() }

// HistoryHorizonForTest is how far back the gate's window of the history
// keeps facts, 0 when it has none open.
func (g *Gate) HistoryHorizonForTest() time.Duration {
	g.hist.mu.Lock()
	defer g.hist.mu.Unlock()
	if g.hist.store == nil {
		return 0
	}
	return g.hist.horizon
}

// FailReadsForTest makes the waiter's reads of records fail while fail is
// set, as when the bucket's stream answers none. Call it before the
// waiter's first wait.
func (w *Waiter) FailReadsForTest(fail *atomic.Bool) {
	w.kv = failingReads{KeyValue: w.kv, fail: fail}
}

type failingReads struct {
	jetstream.KeyValue
	fail *atomic.Bool
}

func (f failingReads) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.fail.Load() {
		return nil, errors.New("the bucket answers no reads (test)")
	}
	return f.KeyValue.Get(ctx, key)
}
