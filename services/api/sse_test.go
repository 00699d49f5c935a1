package api_test

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// sse is one server-sent event.
type sse struct{ event, id, data string }

// openEvents opens GET /v1/events as the named token's owner and returns a
// function that waits for the next event of a kind (failing the test when
// ctx ends first).
func (e *env) openEvents(t *testing.T, ctx context.Context, name string) func(kind string) sse {
	t.Helper()
	next, _ := e.resumeEvents(t, ctx, name, "")
	return next
}

// resumeEvents opens GET /v1/events with lastID as Last-Event-ID (none
// when empty); closing ends the stream.
func (e *env) resumeEvents(t *testing.T, ctx context.Context, name, lastID string) (next func(kind string) sse, closeStream func()) {
	t.Helper()
	ctx, closeStream = context.WithCancel(ctx)
	t.Cleanup(closeStream)
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.tokens[name])
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan sse, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" {
					events <- cur
				}
				cur = sse{}
			case strings.HasPrefix(line, "event: "):
				cur.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return func(kind string) sse {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("stream ended before a %s event", kind)
				}
				if ev.event == kind || kind == "" {
					return ev
				}
			case <-ctx.Done():
				t.Fatalf("no %s event", kind)
			}
		}
	}, closeStream
}

// A client that reconnects with the id of the last event it saw gets every
// event stored while it was away, replayed from the streams in order and
// each once, then the live ones.
func TestEventStreamResumesFromLastEventID(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next, closeStream := e.resumeEvents(t, ctx, "alice", "")
	first := e.pendingApproval(t, "run-resume-1", "payments.send")
	seen := next("requested")
	if !strings.Contains(seen.data, first) || seen.id == "" {
		t.Fatalf("requested event %+v", seen)
	}
	closeStream()

	// While the client is away: the first is decided, a second requested.
	e.approve(t, "alice", first)
	second := e.pendingApproval(t, "run-resume-2", "payments.send")

	next, _ = e.resumeEvents(t, ctx, "alice", seen.id)
	var got []string
	for len(got) < 2 {
		ev := next("")
		got = append(got, ev.event+" "+eventIDIn(ev.data, first, second))
	}
	// Each once; their order across the two streams is not defined (the
	// request may also reach the feed just after the client is back).
	want := []string{"decided " + first, "requested " + second}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("replayed %q, want %q in any order", got, want)
	}
	// Then live, with no replayed event twice.
	e.approve(t, "alice", second)
	if ev := next(""); ev.event != "decided" || !strings.Contains(ev.data, second) {
		t.Fatalf("after the replay: %+v, want the live decision of %s", ev, second)
	}

	// An id from an earlier release ("<stream>:<seq>") resumes its stream.
	legacy := strings.Split(seen.id, ",")[0]
	if !strings.HasPrefix(legacy, contracts.StreamRequests+":") {
		t.Fatalf("event id %q does not start with its own stream and sequence", seen.id)
	}
	next, _ = e.resumeEvents(t, ctx, "alice", legacy)
	if ev := next(""); ev.event != "requested" || !strings.Contains(ev.data, second) {
		t.Fatalf("resumed from %s: %+v, want the request of %s", legacy, ev, second)
	}
	// Resuming asked the server for nothing the API's user may not do (an
	// ordered consumer's deletes were refused, a false alarm on the
	// permission metric each time).
	for _, v := range e.srv.Violations() {
		if strings.Contains(v, "CONSUMER.DELETE."+contracts.StreamEvents) || strings.Contains(v, "CONSUMER.DELETE."+contracts.StreamRequests) {
			t.Errorf("a resume met a permission violation: %s", v)
		}
	}
}

func eventIDIn(data string, ids ...string) string {
	for _, id := range ids {
		if strings.Contains(data, id) {
			return id
		}
	}
	return "?"
}

// consumers counts the consumers of a stream.
func (e *env) consumers(t *testing.T, stream string) int {
	t.Helper()
	st, err := e.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Consumers
}

// logDecided logs, for a failed test, whether the decided event of id is
// stored and what its record says: a missing event and a feed that did not
// deliver it read differently.
func (e *env) logDecided(t *testing.T, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := e.js.Stream(ctx, contracts.StreamEvents); err == nil {
		m, err := st.GetLastMsgForSubject(ctx, contracts.DecidedSubject(id))
		if err == nil {
			t.Logf("decided event of %s stored at sequence %d, %s", id, m.Sequence, m.Time.Format(time.RFC3339Nano))
		} else {
			t.Logf("decided event of %s: %v", id, err)
		}
	}
	if kv, err := e.js.KeyValue(ctx, contracts.BucketApprovals); err == nil {
		if entry, err := kv.Get(ctx, id); err == nil {
			t.Logf("record of %s, revision %d: %.300s", id, entry.Revision(), entry.Value())
		}
	}
}

// Every open event stream of one API process shares the same two
// consumers, and each gets every event.
func TestEventStreamsShareOneFeed(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := map[string]int{}
	for _, st := range []string{contracts.StreamRequests, contracts.StreamEvents} {
		before[st] = e.consumers(t, st)
	}
	var streams []func(string) sse
	for range 12 {
		streams = append(streams, e.openEvents(t, ctx, "alice"))
	}
	for st, n := range before {
		if got := e.consumers(t, st); got != n+1 {
			t.Errorf("%s: %d consumers with 12 event streams open, want %d (one feed)", st, got, n+1)
		}
	}
	id := e.pendingApproval(t, "run-feed", "deploy")
	e.approve(t, "bob", id)
	reading := -1
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stream %d of %d was being read", reading, len(streams))
			e.logDecided(t, id)
		}
	})
	for i, next := range streams {
		reading = i
		if ev := next("requested"); !strings.Contains(ev.data, id) {
			t.Fatalf("stream %d: requested event %+v", i, ev)
		}
		if ev := next("decided"); !strings.Contains(ev.data, id) {
			t.Fatalf("stream %d: decided event %+v", i, ev)
		}
	}
}

// A feed whose consumer is lost on the server (deleted, expired) makes it
// again from the last message it delivered, and the open event streams get
// what was stored meanwhile. (A deletion is noticed from the server's
// answer to the pending pull; a consumer lost without one is noticed from
// missing heartbeats, every feedHeartbeat.)
func TestEventStreamsSurviveALostFeedConsumer(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.js.Stream(ctx, contracts.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	// Other parts of the API follow the stream too (the gate's history of
	// decisions): the feed's consumer is the one the event stream adds.
	before := consumerNames(t, ctx, st)
	next := e.openEvents(t, ctx, "alice")
	first := e.pendingApproval(t, "run-lost-feed-1", "deploy")
	if ev := next("requested"); !strings.Contains(ev.data, first) {
		t.Fatalf("requested event %+v", ev)
	}
	var lost []string
	for _, name := range consumerNames(t, ctx, st) {
		if !slices.Contains(before, name) {
			lost = append(lost, name)
		}
	}
	if len(lost) != 1 {
		t.Fatalf("%d consumers of %s added by the event stream, want the feed's one: %v (before: %v)", len(lost), contracts.StreamEvents, lost, before)
	}
	if err := st.DeleteConsumer(ctx, lost[0]); err != nil {
		t.Fatal(err)
	}
	e.approve(t, "bob", first)
	if ev := next("decided"); !strings.Contains(ev.data, first) {
		t.Fatalf("decided event %+v", ev)
	}
}

// consumerNames lists the consumers of st.
func consumerNames(t *testing.T, ctx context.Context, st jetstream.Stream) []string {
	t.Helper()
	names := st.ConsumerNames(ctx)
	var out []string
	for name := range names.Name() {
		out = append(out, name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
