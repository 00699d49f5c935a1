package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// heartbeatEvery is how often an idle event stream sends a comment, so
// proxies and clients can tell it is alive.
const heartbeatEvery = 15 * time.Second

type streamMsg struct {
	kind string
	// stream and seq say where the message is stored.
	stream string
	seq    uint64
	data   []byte
}

// feedPos is how far a client has read each followed stream. The id of
// every event sent says it: "<stream>:<seq>" of the event itself (as
// earlier releases sent), then the other stream's position, e.g.
// "HITL_EVENTS:40,HITL_REQUESTS:12". A client that reconnects with it as
// Last-Event-ID gets every event stored after it (replayed from the
// streams) before the live ones, each once.
type feedPos struct{ requests, events uint64 }

// id is the event id of m sent at position c.
func (c feedPos) id(m streamMsg) string {
	req := contracts.StreamRequests + ":" + strconv.FormatUint(c.requests, 10)
	ev := contracts.StreamEvents + ":" + strconv.FormatUint(c.events, 10)
	if m.stream == contracts.StreamRequests {
		return req + "," + ev
	}
	return ev + "," + req
}

// advance moves c past m and reports whether m is new to the client.
func (c *feedPos) advance(m streamMsg) bool {
	at := &c.events
	if m.stream == contracts.StreamRequests {
		at = &c.requests
	}
	if m.seq <= *at {
		return false
	}
	*at = m.seq
	return true
}

// parseFeedPos reads a Last-Event-ID: an id this server sent, or the
// "<stream>:<seq>" ids earlier releases sent (that stream resumes; the
// other starts from now).
func parseFeedPos(id string, now feedPos) (feedPos, bool) {
	c := now
	seen := false
	for _, part := range strings.Split(id, ",") {
		name, num, ok := strings.Cut(strings.TrimSpace(part), ":")
		seq, err := strconv.ParseUint(num, 10, 64)
		if !ok || err != nil {
			return now, false
		}
		switch name {
		case contracts.StreamRequests:
			c.requests = min(seq, now.requests)
		case contracts.StreamEvents:
			c.events = min(seq, now.events)
		default:
			return now, false
		}
		seen = true
	}
	return c, seen
}

// maxReplay bounds the events replayed to one reconnecting client; one
// further behind gets a "reset" event and reads the state afresh.
const maxReplay = 10000

// maxReplays bounds the replays one API process runs at once, and
// replayInactive is how long a replay's consumer outlives its last read.
const (
	maxReplays     = 32
	replayInactive = 5 * time.Second
)

// getEvents answers GET /v1/events: every new request, outcome and change
// from now on, as Server-Sent Events. The event id is "<stream>:<sequence>".
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	s.streamEvents(w, r, principalFrom(r.Context()), ": countersign events\n\n", func(_ context.Context, m streamMsg) ([]byte, bool) { return m.data, true },
		func(aerr *Error) { writeError(w, aerr) })
}

// streamEvents follows every new request, outcome and change (the
// requests stream and the decided and changed events) and writes each, as
// render makes it, as a server-sent event, with heartbeats, until the
// client or the server goes away. fail answers when the streams cannot be
// followed; preamble starts the stream.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, p *Principal, preamble string,
	render func(context.Context, streamMsg) ([]byte, bool), fail func(*Error)) {
	release, ok := s.openStream(w, p, fail)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if !p.Expires.IsZero() {
		// A credential that expires ends its stream then; the client
		// reconnects with a new one and resumes from its last event.
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, p.Expires.Sub(s.cfg.Now()))
		defer stop()
	}
	sub, err := s.feed.subscribe()
	if err != nil {
		fail(s.backendError("follow the event streams", err))
		return
	}
	defer s.feed.unsubscribe(sub)
	pos, replay, aerr := s.resumeAt(ctx, r.Header.Get("Last-Event-ID"), sub.from)
	if aerr != nil {
		if aerr.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		fail(aerr)
		return
	}
	es := &eventStream{s: s, w: w, rc: http.NewResponseController(w), p: p, pos: pos, render: render}
	if es.begin(preamble) != nil {
		return
	}
	if es.catchUp(ctx, sub, replay) != nil {
		return
	}
	es.live(ctx, sub)
}

// eventStream writes the server-sent events of one connected client.
type eventStream struct {
	s      *Server
	w      http.ResponseWriter
	rc     *http.ResponseController
	p      *Principal
	pos    feedPos
	render func(context.Context, streamMsg) ([]byte, bool)
}

// begin writes the response's header and preamble.
func (es *eventStream) begin(preamble string) error {
	h := es.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	es.w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(es.w, preamble); err != nil {
		return err
	}
	return es.rc.Flush()
}

// catchUp sends what the client missed, or a "reset" event when it is too
// far behind to replay (the client then reads the state afresh and the
// stream goes on from where sub started).
func (es *eventStream) catchUp(ctx context.Context, sub *feedSub, replay []streamMsg) error {
	if len(replay) > maxReplay {
		es.pos = sub.from
		if _, err := fmt.Fprintf(es.w, "event: reset\nid: %s\ndata: {}\n\n", es.pos.id(streamMsg{stream: contracts.StreamEvents})); err != nil {
			return err
		}
		replay = nil
	}
	for _, m := range replay {
		if err := es.send(ctx, m); err != nil {
			return err
		}
	}
	return es.rc.Flush()
}

// live sends the live events of sub, with heartbeats, until the client
// or the server goes away, or sub is dropped for being too slow to keep up
// (the client then reconnects and resumes).
func (es *eventStream) live(ctx context.Context, sub *feedSub) {
	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	for {
		select {
		case <-sub.dropped:
			return
		case m := <-sub.ch:
			if es.send(ctx, m) != nil {
				return
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(es.w, ": heartbeat\n\n"); err != nil {
				return
			}
		case <-ctx.Done():
			return
		case <-es.s.done:
			return
		}
		if es.rc.Flush() != nil {
			return
		}
	}
}

// send writes m as an event when it is new to the client, about a request
// the client may read, and rendered.
func (es *eventStream) send(ctx context.Context, m streamMsg) error {
	if !es.pos.advance(m) {
		return nil // replayed already, or older than where the client is
	}
	shown, ok := es.s.forReader(ctx, es.p, m)
	if !ok {
		return nil // about a request this client may not read
	}
	m.data = shown
	data, ok := es.render(ctx, m)
	if !ok {
		return nil
	}
	_, err := fmt.Fprintf(es.w, "event: %s\nid: %s\ndata: %s\n\n", m.kind, es.pos.id(m), data)
	return err
}

// resumeAt is where a client that last saw event lastID resumes: where it
// was, with what it missed replayed, or where the feed is now (no id, or
// one this API did not give). Replays are bounded per process: each holds a
// consumer of a stream every API replica shares (the server allows 1,000).
func (s *Server) resumeAt(ctx context.Context, lastID string, now feedPos) (feedPos, []streamMsg, *Error) {
	from, ok := parseFeedPos(lastID, now)
	if lastID == "" || !ok || from == now {
		return now, nil, nil
	}
	select {
	case s.feed.replays <- struct{}{}:
	default:
		return now, nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "too many event streams are catching up at once; reconnect in a second")
	}
	replay, err := s.replay(ctx, from, now)
	<-s.feed.replays
	if err != nil {
		return now, nil, s.backendError("replay the event streams", err)
	}
	return from, replay, nil
}

// feedSources are what event streams carry: every request, and the
// decided and changed events.
var feedSources = []struct {
	stream  string
	filters []string
}{
	{contracts.StreamRequests, []string{contracts.SubjectToolRequestedPrefix + ">", contracts.SubjectInputRequestedPrefix + ">"}},
	{contracts.StreamEvents, []string{contracts.SubjectDecidedPrefix + ">", contracts.SubjectChangedPrefix + ">"}},
}

// feedBuffer is how many messages a connected event stream may fall behind
// before it is dropped.
const feedBuffer = 1024

// feed follows feedSources once per API process, from its first event
// stream until the server closes, and copies every message to each
// connected stream. Open pages and API clients therefore cost the bus
// nothing each: two ordered consumers per process, whatever their number
// (the server allows 1,000 consumers per stream by default). A stream that
// falls feedBuffer messages behind is dropped and its client reconnects.
type feed struct {
	s       *Server
	mu      sync.Mutex
	subs    map[*feedSub]struct{}
	started bool
	stops   []func()
	// at is how far the feed has fanned out each stream.
	at feedPos
	// replays holds a token per replay running (at most maxReplays).
	replays chan struct{}
}

// feedSub is one connected event stream.
type feedSub struct {
	ch      chan streamMsg
	dropped chan struct{}
	// from is where the feed was when the stream connected: it gets every
	// message after it.
	from feedPos
}

func newFeed(s *Server) *feed {
	return &feed{s: s, subs: map[*feedSub]struct{}{}, replays: make(chan struct{}, maxReplays)}
}

// subscribe connects one event stream, starting the feed on first use.
func (f *feed) subscribe() (*feedSub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.s.done:
		return nil, errors.New("the server is shutting down")
	default:
	}
	if !f.started {
		if err := f.start(); err != nil {
			return nil, err
		}
		f.started = true
	}
	sub := &feedSub{ch: make(chan streamMsg, feedBuffer), dropped: make(chan struct{}), from: f.at}
	f.subs[sub] = struct{}{}
	return sub, nil
}

func (f *feed) unsubscribe(sub *feedSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, sub)
}

// start creates the consumers and the goroutine that fans out; f.mu is held.
func (f *feed) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	in := make(chan streamMsg, feedBuffer)
	stops := []func(){cancel}
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for _, src := range feedSources {
		stop, last, err := f.s.follow(ctx, src.stream, src.filters, in)
		if err != nil {
			stopAll()
			return err
		}
		f.at.advance(streamMsg{stream: src.stream, seq: last})
		stops = append(stops, stop)
	}
	f.stops = stops
	go f.fanOut(ctx, in)
	return nil
}

func (f *feed) fanOut(ctx context.Context, in <-chan streamMsg) {
	for {
		select {
		case m := <-in:
			f.mu.Lock()
			f.at.advance(m)
			for sub := range f.subs {
				select {
				case sub.ch <- m:
				default:
					delete(f.subs, sub)
					close(sub.dropped)
				}
			}
			f.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}

// close stops the feed's consumers.
func (f *feed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, stop := range f.stops {
		stop()
	}
	f.stops = nil
}

// The feed's consumers ask the server for a heartbeat every feedHeartbeat
// while they wait: a consumer that stops delivering (lost on the server, a
// pull that went unanswered) is noticed after two missed beats and made
// again from the last message it delivered, so live pages and event
// streams stall for seconds, not for the client library's default of ten.
const (
	feedHeartbeat  = 2 * time.Second
	feedPullExpiry = 10 * time.Second
)

// follow delivers the messages stored on stream after now (matching
// filters) to out until ctx ends. The consumer exists when it returns; last
// is the stream's last sequence before it.
func (s *Server) follow(ctx context.Context, stream string, filters []string, out chan<- streamMsg) (stop func(), last uint64, err error) {
	st, err := s.cfg.JS.Stream(ctx, stream)
	if err != nil {
		return nil, 0, err
	}
	last = st.CachedInfo().State.LastSeq
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    filters,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       last + 1,
		InactiveThreshold: 30 * time.Second,
	}
	cons, err := s.cfg.JS.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, 0, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		sm, ok := toStreamMsg(stream, m)
		if !ok {
			return
		}
		select {
		case out <- sm:
		case <-ctx.Done():
		}
	}, jetstream.PullExpiry(feedPullExpiry), jetstream.PullHeartbeat(feedHeartbeat))
	if err != nil {
		return nil, 0, err
	}
	return cc.Stop, last, nil
}

func toStreamMsg(stream string, m jetstream.Msg) (streamMsg, bool) {
	md, err := m.Metadata()
	if err != nil {
		return streamMsg{}, false
	}
	return streamMsg{kind: eventKind(m.Subject()), stream: stream, seq: md.Sequence.Stream, data: oneLine(m.Data())}, true
}

// replay reads what the followed streams stored after from, up to to (where
// the client's live feed starts), oldest first per stream; more than
// maxReplay messages stops the read (the caller resets the client).
func (s *Server) replay(ctx context.Context, from, to feedPos) ([]streamMsg, error) {
	var out []streamMsg
	for _, src := range feedSources {
		start, end := from.events, to.events
		if src.stream == contracts.StreamRequests {
			start, end = from.requests, to.requests
		}
		if start >= end {
			continue
		}
		// A plain ephemeral pull consumer, not an ordered one: an ordered
		// consumer deletes and recreates itself between fetches, which the
		// API may not do on the shared streams (each try was a permission
		// violation). This one is gone by itself a few seconds after its
		// last read.
		cons, err := s.cfg.JS.CreateConsumer(ctx, src.stream, jetstream.ConsumerConfig{
			FilterSubjects: src.filters, DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq: start + 1, InactiveThreshold: replayInactive,
			AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true,
		})
		if err != nil {
			return nil, err
		}
		for len(out) <= maxReplay {
			batch, err := cons.FetchNoWait(256)
			if err != nil {
				return nil, err
			}
			n, done := 0, false
			for m := range batch.Messages() {
				n++
				sm, ok := toStreamMsg(src.stream, m)
				if !ok {
					continue
				}
				if sm.seq > end {
					done = true
					continue
				}
				out = append(out, sm)
				if sm.seq == end {
					done = true
				}
			}
			if err := batch.Error(); err != nil {
				return nil, err
			}
			if done || n == 0 {
				break
			}
		}
	}
	return out, nil
}

// oneLine keeps an event's data on one "data:" line. In JSON a raw line
// break can only be whitespace between tokens, so dropping it changes nothing.
func oneLine(data []byte) []byte {
	for _, c := range data {
		if c == '\n' || c == '\r' {
			out := make([]byte, 0, len(data))
			for _, c := range data {
				if c != '\n' && c != '\r' {
					out = append(out, c)
				}
			}
			return out
		}
	}
	return data
}
