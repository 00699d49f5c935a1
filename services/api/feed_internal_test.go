package api

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/services/countersigntest"
)

// A stream that stops reading is dropped once it is feedBuffer messages
// behind; a stream that keeps reading gets every message meanwhile.
func TestFeedDropsOnlyTheStreamThatFallsBehind(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	s, err := New(ctx, Config{JS: apiJS, Gate: countersigntest.Gate(t, apiJS, nil), Registerer: reg, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	stalled, err := s.feed.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	reading, err := s.feed.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer s.feed.unsubscribe(reading)
	total := feedBuffer + 100
	// The reader reports its count after each message; the messages go out
	// in batches that wait for it, so only the stalled stream falls behind.
	progress := make(chan int, total)
	got := make(chan int, 1)
	go func() {
		n := 0
		for n < total {
			select {
			case <-reading.ch:
				n++
				progress <- n
			case <-reading.dropped:
				got <- -n
				return
			case <-ctx.Done():
				got <- n
				return
			}
		}
		got <- n
	}()
	for sent := 0; sent < total; {
		for range min(100, total-sent) {
			if _, err := events.PublishRaw(ctx, js, contracts.ToolRequestedSubject("feed"), []byte(`{}`), "", nil); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		for n := 0; n < sent; {
			select {
			case n = <-progress:
			case <-ctx.Done():
				t.Fatalf("the reading stream got %d of %d messages", n, sent)
			}
		}
	}
	select {
	case <-stalled.dropped:
	case <-ctx.Done():
		t.Fatalf("the stalled stream was not dropped after %d messages", total)
	}
	if n := <-got; n != total {
		t.Fatalf("the reading stream got %d of %d messages (negative: it was dropped)", n, total)
	}
	s.feed.mu.Lock()
	_, still := s.feed.subs[stalled]
	subs := len(s.feed.subs)
	s.feed.mu.Unlock()
	if still || subs != 1 {
		t.Fatalf("after the drop: stalled still subscribed %v, %d subscribers (want 1)", still, subs)
	}
}
