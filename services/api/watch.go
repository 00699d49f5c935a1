package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// recordState is one version of a record.
type recordState struct {
	rec *contracts.Record
	rev uint64
}

// recordWatch follows one record. It keeps only the newest state and
// signals wake (which several watches may share) when it changes; the
// waiting request reads the state in its own goroutine.
type recordWatch struct {
	id   string
	wake chan struct{}

	mu     sync.Mutex
	latest recordState
}

func (w *recordWatch) push(st recordState) {
	w.mu.Lock()
	if st.rev <= w.latest.rev {
		w.mu.Unlock()
		return
	}
	w.latest = st
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// state is the newest state seen, if the record exists.
func (w *recordWatch) state() (recordState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest, w.latest.rec != nil
}

// watch follows record id on the index's watch of the bucket: no watch or
// goroutine of its own. The record is read after the watch is registered,
// so a change that lands in between is seen by one or the other. wake
// (capacity 1) is signalled at every new state; stop releases the watch.
func (ix *index) watch(ctx context.Context, id string, wake chan struct{}) (w *recordWatch, stop func(), err error) {
	w = &recordWatch{id: id, wake: wake}
	ix.mu.Lock()
	ix.watches[id] = append(ix.watches[id], w)
	ix.mu.Unlock()
	stop = func() {
		ix.mu.Lock()
		defer ix.mu.Unlock()
		list := slices.DeleteFunc(ix.watches[id], func(x *recordWatch) bool { return x == w })
		if len(list) == 0 {
			delete(ix.watches, id)
		} else {
			ix.watches[id] = list
		}
	}
	e, err := ix.kv.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return w, stop, nil
	case err != nil:
		stop()
		return nil, nil, err
	}
	var rec contracts.Record
	if err := contracts.DecodeRecord(id, e.Value(), &rec); err != nil {
		stop()
		return nil, nil, fmt.Errorf("record %s is unreadable: %w", id, err)
	}
	w.push(recordState{rec: &rec, rev: e.Revision()})
	return w, stop, nil
}

// notify hands a new value of a watched record to its watches.
func (ix *index) notify(e jetstream.KeyValueEntry) {
	ix.mu.Lock()
	list := slices.Clone(ix.watches[e.Key()])
	ix.mu.Unlock()
	if len(list) == 0 {
		return
	}
	var rec contracts.Record
	if err := contracts.DecodeRecord(e.Key(), e.Value(), &rec); err != nil {
		return // logged by apply
	}
	for _, w := range list {
		w.push(recordState{rec: &rec, rev: e.Revision()})
	}
}
