package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/services/countersigntest"
)

// newInternalServer starts an API server as the API's NATS user of srv
// with cfg (its bus, gate and metrics filled in), closed when the test ends.
func newInternalServer(t *testing.T, srv *eventstest.Server, cfg Config) *Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	cfg.JS, cfg.Gate, cfg.Registerer, cfg.Gatherer = apiJS, countersigntest.Gate(t, apiJS, nil), reg, reg
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A stream that stops reading is dropped once it is feedBuffer messages
// behind; a stream that keeps reading gets every message meanwhile.
func TestFeedDropsOnlyTheStreamThatFallsBehind(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newInternalServer(t, srv, Config{})

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
	tok, hash, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	s := newInternalServer(t, srv, Config{Tokens: []Token{{Name: "a", Subject: "alice", SHA256: hash, Roles: []string{RoleApprover}}}})
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

// A change to a record the index no longer holds (older than the decided
// records it keeps) reaches the event streams of those who may read the
// record, and only theirs: the bucket decides who reads it, not the index.
func TestFeedSendsChangesOfRecordsOlderThanTheIndexKeeps(t *testing.T) {
	srv := eventstest.NewServer(t)
	admin := srv.JetStream()
	srv.Provision(admin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tokens := map[string]string{}
	var toks []Token
	for _, id := range []string{"alice", "mallory"} {
		tok, hash, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[id] = tok
		toks = append(toks, Token{Name: id, Subject: id, SHA256: hash, Roles: []string{RoleApprover}})
	}
	s := newInternalServer(t, srv, Config{Tokens: toks, IndexRecent: 1})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)

	kv, err := admin.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	decided := func(id string, approvers ...string) {
		t.Helper()
		at := time.Now().UTC()
		rec := approval.NewRecord(contracts.ApprovalRequested{
			Spec: contracts.SpecApprovalRequested, EventID: id, Kind: contracts.KindToolApproval,
			Run:      contracts.Run{ID: "run-" + id, Agent: "billing-bot"},
			ToolCall: &contracts.ToolCall{ID: "c1", Name: "deploy", Arguments: json.RawMessage(`{}`)},
			Quorum:   contracts.Quorum{Required: 1, Approvers: approvers}, CreatedAt: at, ExpiresAt: at.Add(time.Hour),
		}, at)
		rec.Status = contracts.StatusApproved
		rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionApprove, DecidedBy: approvers[:1], DecidedAt: at}
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, id, data); err != nil {
			t.Fatal(err)
		}
	}
	older, newer := "old-"+uuid.NewString(), "new-"+uuid.NewString()
	decided(older, "alice")
	decided(newer, "alice", "mallory")
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if s.index.who(older) != nil || s.index.who(newer) == nil {
		t.Fatalf("the index keeps one decided record: want only the newer, has older %v, newer %v",
			s.index.who(older) != nil, s.index.who(newer) != nil)
	}

	open := func(name string) <-chan string {
		req, err := http.NewRequestWithContext(ctx, "GET", hs.URL+"/v1/events", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokens[name])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: events: status %d", name, resp.StatusCode)
		}
		lines := make(chan string, 16)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					lines <- data
				}
			}
		}()
		return lines
	}
	aliceSees, mallorySees := open("alice"), open("mallory")
	// The feed has started (the first stream started it), so both events
	// below are after every stream's start; they are stored in this order.
	for _, ev := range []struct {
		subject string
		v       any
	}{
		{contracts.ChangedSubject(older), contracts.Changed{Spec: contracts.SpecChanged, EventID: older, Change: "claimed",
			Status: contracts.StatusApproved, Revision: 2, At: time.Now().UTC()}},
		{contracts.ChangedSubject(newer), contracts.Changed{Spec: contracts.SpecChanged, EventID: newer, Change: "claimed",
			Status: contracts.StatusApproved, Revision: 3, At: time.Now().UTC()}},
	} {
		if _, err := events.Publish(ctx, admin, ev.subject, ev.v, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	next := func(name string, lines <-chan string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the event stream ended", name)
			}
			return l
		case <-ctx.Done():
			t.Fatalf("%s: no event", name)
		}
		return ""
	}
	if got := next("alice", aliceSees); !strings.Contains(got, older) {
		t.Fatalf("alice, who may read the older record, first got %s; want its change", got)
	}
	if got := next("alice", aliceSees); !strings.Contains(got, newer) {
		t.Fatalf("alice then got %s; want the newer record's change", got)
	}
	if got := next("mallory", mallorySees); !strings.Contains(got, newer) {
		t.Fatalf("mallory, who may not read the older record, first got %s; want only the newer record's change", got)
	}
}
