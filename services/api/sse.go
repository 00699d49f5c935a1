package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
	msgs := make(chan streamMsg, 64)
	sources := []struct {
		stream  string
		filters []string
	}{
		{contracts.StreamRequests, []string{contracts.SubjectToolRequestedPrefix + ">", contracts.SubjectInputRequestedPrefix + ">"}},
		{contracts.StreamEvents, []string{contracts.SubjectDecidedPrefix + ">", contracts.SubjectChangedPrefix + ">"}},
	}
	var stops []func()
	defer func() {
		cancel() // first, so no delivery stays blocked on msgs
		for _, stop := range stops {
			stop()
		}
	}()
	for _, src := range sources {
		stop, err := s.follow(ctx, src.stream, src.filters, msgs)
		if err != nil {
			fail(s.backendError("follow "+src.stream, err))
			return
		}
		stops = append(stops, stop)
	}
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
		case m := <-msgs:
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
