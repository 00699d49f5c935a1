package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
	id   string
	data []byte
}

// getEvents answers GET /v1/events: every new request, outcome and change
// from now on, as Server-Sent Events. The event id is "<stream>:<sequence>".
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	s.streamEvents(w, r, ": countersign events\n\n", func(_ context.Context, m streamMsg) ([]byte, bool) { return m.data, true },
		func(aerr *apiError) { writeError(w, aerr) })
}

// streamEvents follows every new request, outcome and change (the
// requests stream and the decided and changed events) and writes each, as
// render makes it, as a server-sent event, with heartbeats, until the
// client or the server goes away. fail answers when the streams cannot be
// followed; preamble starts the stream.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, preamble string,
	render func(context.Context, streamMsg) ([]byte, bool), fail func(*apiError)) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	rc := http.NewResponseController(w)
	sub, err := s.feed.subscribe()
	if err != nil {
		fail(s.backendError("follow the event streams", err))
		return
	}
	defer s.feed.unsubscribe(sub)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, preamble); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	for {
		select {
		case <-sub.dropped:
			// Too slow to keep up: the client reconnects and reloads.
			return
		case m := <-sub.ch:
			data, ok := render(ctx, m)
			if !ok {
				continue
			}
			if _, err := fmt.Fprintf(w, "event: %s\nid: %s\ndata: %s\n\n", m.kind, m.id, data); err != nil {
				return
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
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
}

// feedSub is one connected event stream.
type feedSub struct {
	ch      chan streamMsg
	dropped chan struct{}
}

func newFeed(s *Server) *feed { return &feed{s: s, subs: map[*feedSub]struct{}{}} }

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
	sub := &feedSub{ch: make(chan streamMsg, feedBuffer), dropped: make(chan struct{})}
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
		stop, err := f.s.follow(ctx, src.stream, src.filters, in)
		if err != nil {
			stopAll()
			return err
		}
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

// follow delivers the messages stored on stream after now (matching
// filters) to out until ctx ends. The consumer exists when it returns.
func (s *Server) follow(ctx context.Context, stream string, filters []string, out chan<- streamMsg) (stop func(), err error) {
	st, err := s.cfg.JS.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    filters,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       st.CachedInfo().State.LastSeq + 1,
		InactiveThreshold: 30 * time.Second,
	}
	cons, err := s.cfg.JS.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		sm := streamMsg{kind: eventKind(m.Subject()), data: oneLine(m.Data())}
		if md, err := m.Metadata(); err == nil {
			sm.id = stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
		select {
		case out <- sm:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
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
