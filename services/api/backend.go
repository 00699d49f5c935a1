package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"time"

	"github.com/countersign/countersign/contracts"
)

// The methods in this file are how the web inbox (package services/inbox),
// or any other page served beside the API, reaches the approvals: with the
// same authentication, the same records index and the same vote path as
// /v1, so a page can show or do nothing the API would not.

// Handle serves pattern (http.ServeMux syntax) on the API's server, inside
// its logging, metrics and panic recovery. Call it before serving.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// AuthenticateSum returns the principal of the token whose SHA-256 is sum,
// searched exactly as a bearer token is (constant time, configured tokens
// and the directory's).
func (s *Server) AuthenticateSum(sum [sha256.Size]byte) (Principal, bool) {
	p := s.authenticateSum(sum)
	if p == nil {
		return Principal{}, false
	}
	return *p, true
}

// Record returns approval id, waiting up to wait for a record about to be
// created (a request seen on the bus before the arbiter made its record).
// A missing record is an *Error with code unknown_event.
// A record p may not read is answered the same, and one with sensitive
// arguments is shown masked unless p may see them (and its opening is
// recorded as a read via the inbox).
func (s *Server) Record(ctx context.Context, p Principal, id string, wait time.Duration) (*contracts.Record, *Error) {
	rec, _, aerr := s.readableRecordSoon(ctx, &p, id, wait)
	if aerr != nil {
		return nil, aerr
	}
	return s.shown(rec, &p), nil
}

// RecordOpened records that p opened record rec in the inbox: a read when
// its arguments have sensitive values, and, while it is pending, an
// opening (contracts.ReadOpened), which holds back the later stages of a
// staggered notification.
func (s *Server) RecordOpened(ctx context.Context, p Principal, rec *contracts.Record) {
	s.recordRead(ctx, SurfaceInbox, &p, rec, contracts.ReadRecord)
	if rec.Status == contracts.StatusPending {
		// A staggered notification stops chasing whoever opened it.
		s.recordOpening(ctx, SurfaceInbox, p.Subject, rec.Request.EventID)
	}
}

// Query selects records for Records; empty fields match every record.
type Query struct {
	// Statuses the records must have one of.
	Statuses []string
	// Limit is the most records returned, newest first.
	Limit int
	// RunID, when set, selects the records of that run.
	RunID string
}

// Records returns the newest records matching q that p may read, after
// bringing the records index up to date with the bucket (as far as it can
// in a few seconds).
func (s *Server) Records(ctx context.Context, p Principal, q Query) ([]*contracts.Record, *Error) {
	if err := s.Settle(ctx); err != nil {
		s.log.Warn("records index is behind the bucket; listing what it holds", "err", err)
	}
	ids, _, err := s.index.list(ctx, listFilter{statuses: q.Statuses, reader: p.Reader(), runID: q.RunID}, nil, q.Limit)
	if err != nil {
		s.log.Warn("listing older history from the bucket failed", "err", err)
		return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "older history cannot be read from the message bus now; retry shortly")
	}
	items, aerr := s.fetchRecords(ctx, ids)
	if aerr != nil {
		return nil, aerr
	}
	out := make([]*contracts.Record, 0, len(items))
	for _, it := range items {
		out = append(out, s.shown(it.Record, &p))
	}
	return out, nil
}

// IndexedRecords is how many records the records index holds in memory:
// every pending one and at most Config.IndexRecent decided ones.
func (s *Server) IndexedRecords() int {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	return len(s.index.byID)
}

// Settle brings the records index up to date with the bucket, waiting at
// most a few seconds.
func (s *Server) Settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return s.index.catchUp(ctx)
}

// Timeline returns the events of approval id (what GET
// /v1/approvals/{event_id}/events answers).
// Nothing is returned of a record p may not read.
func (s *Server) Timeline(ctx context.Context, p Principal, id string) ([]TimelineEvent, error) {
	rec, _, aerr := s.readableRecord(ctx, &p, id)
	if aerr != nil {
		return nil, aerr
	}
	evs, _, err := s.readEvents(ctx, id)
	return s.shownEvents(rec, &p, evs), err
}

// Change is one message of the live feed: its kind (KindRequested,
// KindChanged, KindDecided) and its JSON as stored.
type Change struct {
	Kind string
	Data json.RawMessage
}

// Follow serves the live feed to the request as server-sent events,
// resuming after the Last-Event-ID the client sends: preamble opens the
// stream, and render makes each change into an event's data (false skips
// it). When the feed cannot be followed, Follow answers with plain text.
func (s *Server) Follow(w http.ResponseWriter, r *http.Request, p Principal, preamble string, render func(context.Context, Change) ([]byte, bool)) {
	s.streamEvents(w, r, &p, preamble, func(ctx context.Context, m streamMsg) ([]byte, bool) {
		return render(ctx, Change{Kind: m.kind, Data: m.data})
	}, func(aerr *Error) { http.Error(w, aerr.Message, aerr.Status) })
}

// AwaitRecord waits up to wait for approval id to have a record, so that a
// page told of a new request finds it.
func (s *Server) AwaitRecord(ctx context.Context, id string, wait time.Duration) {
	s.awaitRecord(ctx, id, wait)
}

// awaitRecord returns approval id's record, read from the bucket, waiting
// up to wait for it to exist (nil if it does not by then).
func (s *Server) awaitRecord(ctx context.Context, id string, wait time.Duration) *contracts.Record {
	rec, _, _, _ := s.watchRecord(ctx, id, wait, func(*contracts.Record) bool { return true })
	return rec
}

// LogCaller names the caller (by its token's name) in the request's access
// log line, for a handler passed to Handle that authenticates by itself.
func LogCaller(w http.ResponseWriter, name string) {
	if lw, ok := w.(*loggingWriter); ok {
		lw.token = name
	}
}
