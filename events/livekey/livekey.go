// Package livekey follows keys of a JetStream key-value bucket with one
// watch and hands every change, in the bucket's order, to the owner of an
// in-memory copy, watching again after a watch fails or ends.
//
// It says when the copy may stand for the bucket: from the moment a watch
// has delivered what the bucket holds until that watch stops. Outside that
// window the owner reads the keys instead, so a copy is never trusted
// while the watch that keeps it is away.
package livekey

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrWatchEnded is what Once answers when the server ended the watch.
var ErrWatchEnded = errors.New("livekey: the watch ended")

// ErrIncomplete is what Once answers for a Watcher without Bucket,
// Install or Ready.
var ErrIncomplete = errors.New("livekey: a Watcher needs Bucket, Install and Ready")

// Watcher follows Keys of the bucket Bucket opens. Its fields are set
// before Run and not changed after.
type Watcher struct {
	// Bucket opens the bucket, before every watch.
	Bucket func(context.Context) (jetstream.KeyValue, error)
	// Keys are the keys, or wildcard filters, watched together.
	Keys []string
	// Install takes one change of a watched key: at the start of each
	// watch the values the bucket holds, then every change, in order.
	// A new watch delivers the bucket's values again, so Install skips
	// revisions it has taken already.
	Install func(jetstream.KeyValueEntry)
	// Ready is told true once a watch has delivered what the bucket
	// holds, and false when that watch stops.
	Ready func(bool)
	// Failed, when set, is told why a watch could not start or ended
	// before the context did.
	Failed func(error)
	// Retry is how long after a watch ends the next one starts (zero: a
	// second).
	Retry time.Duration
}

// Run watches until ctx ends, watching again Retry after each watch ends.
func (w *Watcher) Run(ctx context.Context) {
	retry := cmp.Or(w.Retry, time.Second)
	for {
		if err := w.Once(ctx); err != nil && ctx.Err() == nil && w.Failed != nil {
			w.Failed(err)
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Once runs one watch until ctx ends (answering nil) or the watch cannot
// start or ends (answering why).
func (w *Watcher) Once(ctx context.Context) error {
	if w.Bucket == nil || w.Install == nil || w.Ready == nil {
		return ErrIncomplete
	}
	kv, err := w.Bucket(ctx)
	if err != nil {
		return err
	}
	// WatchFiltered rewrites the slice it is given: every watch gets a
	// copy of Keys.
	kw, err := kv.WatchFiltered(ctx, slices.Clone(w.Keys))
	if err != nil {
		return err
	}
	defer func() {
		_ = kw.Stop()
		w.Ready(false)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return ErrWatchEnded
			}
			if e == nil {
				w.Ready(true)
				continue
			}
			w.Install(e)
		}
	}
}
