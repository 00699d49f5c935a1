package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/eventstest"
)

// A reader takes the newest value it accepts under a key, past what it
// refuses after it, and is told the key's last revision for its next
// write; a deletion after the last accepted value leaves none; a key
// without a message is not found.
func TestNewestReadableTakesTheNewestValueTheReaderAccepts(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	ctx := context.Background()
	// A bucket that keeps a key's history, as buckets of earlier releases
	// did (those of this release keep one value a key).
	const bucket = "readable_test"
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 8})
	if err != nil {
		t.Fatal(err)
	}
	mine := func(data []byte) bool { return strings.HasPrefix(string(data), "mine:") }
	read := func(key string) events.Readable {
		t.Helper()
		r, err := events.NewestReadable(ctx, js, kv, bucket, key, mine)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	put := func(key, value string) uint64 {
		t.Helper()
		rev, err := kv.Put(ctx, key, []byte(value))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	if _, err := events.NewestReadable(ctx, js, kv, bucket, "p.none", mine); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a key without a message: %v, want ErrKeyNotFound", err)
	}
	put("p.a", "mine:1")
	put("p.other", "mine:other")
	second := put("p.a", "mine:2")
	if r := read("p.a"); string(r.Value) != "mine:2" || r.Revision != second || r.Last != second {
		t.Fatalf("accepted last value: %+v", r)
	}
	put("p.a", "junk 1")
	put("p.other", "mine:other 2")
	last := put("p.a", "junk 2")
	if r := read("p.a"); string(r.Value) != "mine:2" || r.Revision != second || r.Last != last {
		t.Fatalf("past two refused values: %q at %d, last %d; want mine:2 at %d, last %d", r.Value, r.Revision, r.Last, second, last)
	}
	if _, err := kv.Update(ctx, "p.a", []byte("mine:3"), last); err != nil {
		t.Fatalf("a write expecting the last revision: %v", err)
	}
	if r := read("p.a"); string(r.Value) != "mine:3" {
		t.Fatalf("after the write: %+v", r)
	}
	if err := kv.Delete(ctx, "p.a"); err != nil {
		t.Fatal(err)
	}
	last = put("p.a", "junk 3")
	if r := read("p.a"); r.Value != nil || r.Last != last {
		t.Fatalf("deleted, then refused: %+v, want no value, last %d", r, last)
	}
}
