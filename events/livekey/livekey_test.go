package livekey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/events/livekey"
)

// recorder is the owner of a copy under test: it passes on every change
// and readiness it is told.
type recorder struct {
	entries chan jetstream.KeyValueEntry
	ready   chan bool
}

func newRecorder() *recorder {
	return &recorder{entries: make(chan jetstream.KeyValueEntry, 16), ready: make(chan bool, 16)}
}

func (r *recorder) watcher(kv jetstream.KeyValue, keys ...string) *livekey.Watcher {
	return &livekey.Watcher{
		Bucket:  func(context.Context) (jetstream.KeyValue, error) { return kv, nil },
		Keys:    keys,
		Install: func(e jetstream.KeyValueEntry) { r.entries <- e },
		Ready:   func(ok bool) { r.ready <- ok },
	}
}

func (r *recorder) entry(t *testing.T, key, value string) {
	t.Helper()
	select {
	case e := <-r.entries:
		if e.Key() != key || string(e.Value()) != value {
			t.Fatalf("installed %s=%q, want %s=%q", e.Key(), e.Value(), key, value)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s=%q was never installed", key, value)
	}
}

func (r *recorder) isReady(t *testing.T, want bool) {
	t.Helper()
	select {
	case got := <-r.ready:
		if got != want {
			t.Fatalf("ready %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("never told ready %v", want)
	}
}

// testBucket is a bucket that takes plain
// writes, on the server of the test.
func testBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "livekey_test", History: 4})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// A watch installs what the bucket holds, then says it is ready, then
// installs every change of the watched keys (and of no other key); it is
// not ready once it stops.
func TestWatchInstallsTheBucketThenEveryChange(t *testing.T) {
	kv := testBucket(t)
	ctx := t.Context()
	if _, err := kv.PutString(ctx, "watched", "v1"); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.watcher(kv, "watched").Once(wctx) }()
	r.entry(t, "watched", "v1")
	r.isReady(t, true)
	if _, err := kv.PutString(ctx, "other", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "watched", "v2"); err != nil {
		t.Fatal(err)
	}
	r.entry(t, "watched", "v2")
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Once ended by its context answered %v", err)
	}
	r.isReady(t, false)
}

// Every watch of one Watcher follows the same keys: the watch after the
// first delivers the bucket's values again.
func TestEveryWatchFollowsTheSameKeys(t *testing.T) {
	kv := testBucket(t)
	if _, err := kv.PutString(t.Context(), "watched", "v1"); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	w := r.watcher(kv, "watched")
	for range 2 {
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Once(ctx) }()
		r.entry(t, "watched", "v1")
		r.isReady(t, true)
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		r.isReady(t, false)
	}
}

// A bucket that cannot be opened is reported to Failed, and Run tries
// again after Retry until its context ends.
func TestRunReportsFailuresAndTriesAgain(t *testing.T) {
	errNoBucket := errors.New("no bucket")
	failed := make(chan error, 16)
	w := &livekey.Watcher{
		Bucket:  func(context.Context) (jetstream.KeyValue, error) { return nil, errNoBucket },
		Install: func(jetstream.KeyValueEntry) {},
		Ready:   func(bool) {},
		Failed:  func(err error) { failed <- err },
		Retry:   time.Millisecond,
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	for range 2 {
		select {
		case err := <-failed:
			if !errors.Is(err, errNoBucket) {
				t.Fatalf("Failed was told %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Failed was not told of the missing bucket")
		}
	}
	stop()
	<-done
}

// A Watcher without the functions it calls answers ErrIncomplete.
func TestIncompleteWatcherIsRefused(t *testing.T) {
	if err := (&livekey.Watcher{}).Once(t.Context()); !errors.Is(err, livekey.ErrIncomplete) {
		t.Fatalf("Once answered %v", err)
	}
}
