package api

import (
	"context"
	"net/http"
	"net/http/httptest"
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

// Replays are bounded per process: past maxReplays running at once, a
// reconnecting stream is told to come back in a second instead of taking
// one more consumer of the shared streams.
func TestReplaysAreBounded(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	reg := prometheus.NewRegistry()
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	tok, hash, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Config{JS: apiJS, Gate: countersigntest.Gate(t, apiJS, nil), Registerer: reg, Gatherer: reg,
		Tokens: []Token{{Name: "a", Subject: "alice", SHA256: hash, Roles: []string{RoleApprover}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// An event on each stream, so a reconnect from the start has something to replay.
	if _, err := events.Publish(context.Background(), srv.JetStream(), contracts.DecidedSubject("e1"), map[string]string{"spec": contracts.SpecDecided}, "d1", nil); err != nil {
		t.Fatal(err)
	}
	for range maxReplays {
		s.feed.replays <- struct{}{}
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Last-Event-ID", contracts.StreamEvents+":0,"+contracts.StreamRequests+":0")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("a replay past the bound: %d (Retry-After %q) %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}
