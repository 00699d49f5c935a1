package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// MaxWait bounds every long poll.
const MaxWait = 60 * time.Second

// recordAnswer is a record with its KV revision.
type recordAnswer struct {
	Record   *contracts.Record `json:"record"`
	Revision uint64            `json:"revision"`
}

// eventIDParam reads and checks the {event_id} path segment.
func eventIDParam(r *http.Request) (string, *Error) {
	id := r.PathValue("event_id")
	if !contracts.ValidEventID(id) {
		return "", fieldError(http.StatusBadRequest, CodeInvalidEventID, "event_id",
			"event_id must be 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_'")
	}
	return id, nil
}

// parseFlag reads a boolean query parameter: absent, "0", "false" are off;
// "", "1", "true" are on.
func parseFlag(r *http.Request, name string) (bool, *Error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return false, nil
	}
	switch q.Get(name) {
	case "", "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, fieldError(http.StatusBadRequest, CodeInvalidParameter, name, "%s must be 1, true, 0 or false", name)
}

// parseWait reads ?wait= as a Go duration ("30s") or a number of seconds.
// Longer waits are cut to MaxWait.
func parseWait(r *http.Request) (time.Duration, *Error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseFloat(v, 64)
		if nerr != nil {
			return 0, fieldError(http.StatusBadRequest, CodeInvalidParameter, "wait", "wait must be a duration such as 30s (at most 60s)")
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d < 0 {
		return 0, fieldError(http.StatusBadRequest, CodeInvalidParameter, "wait", "wait must not be negative")
	}
	return min(d, MaxWait), nil
}

// getRecord reads a record; a missing one is 404 unknown_event.
func (s *Server) getRecord(ctx context.Context, id string) (*contracts.Record, uint64, *Error) {
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, errorf(http.StatusNotFound, CodeUnknownEvent, "no approval %s", id)
	}
	if err != nil {
		return nil, 0, s.backendError("read record", err)
	}
	var rec contracts.Record
	if err := contracts.DecodeRecord(id, e.Value(), &rec); err != nil {
		s.log.Error("unreadable approval record", "event_id", id, "err", err)
		return nil, 0, errorf(http.StatusInternalServerError, CodeInternal, "approval %s is unreadable", id)
	}
	return &rec, e.Revision(), nil
}

// getRecordSoon is getRecord for a record that may be about to exist: a
// vote or command sent right after its review can overtake the arbiter
// creating the record. It waits up to d for the record before answering
// unknown_event.
func (s *Server) getRecordSoon(ctx context.Context, id string, d time.Duration) (*contracts.Record, uint64, *Error) {
	rec, rev, aerr := s.getRecord(ctx, id)
	if aerr == nil || aerr.Code != CodeUnknownEvent {
		return rec, rev, aerr
	}
	wake := make(chan struct{}, 1)
	w, stop, err := s.index.watch(ctx, id, wake)
	if err != nil {
		return nil, 0, s.backendError("watch record", err)
	}
	defer stop()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		if st, ok := w.state(); ok {
			return st.rec, st.rev, nil
		}
		select {
		case <-wake:
		case <-timer.C:
			return nil, 0, aerr
		case <-ctx.Done():
			return nil, 0, aerr
		}
	}
}

// backendError maps a NATS failure to 503 when NATS is unreachable or slow,
// to 413 for a message larger than the bus takes, else to 500.
func (s *Server) backendError(what string, err error) *Error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == http.StatusServiceUnavailable,
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected):
		s.log.Warn("NATS unavailable", "op", what, "err", err)
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the message bus is unavailable; retry shortly")
	case errors.Is(err, context.Canceled):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the request was cancelled")
	case errors.Is(err, nats.ErrMaxPayload):
		// Nothing was published: the message would not fit the bus.
		return errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the request is too large for the message bus; send smaller arguments")
	}
	s.log.Error("NATS request failed", "op", what, "err", err)
	return errorf(http.StatusInternalServerError, CodeInternal, "internal error")
}

// watchRecord waits until done(record) holds, ctx ends, or wait elapses,
// and returns the newest record seen (nil if the record does not exist).
func (s *Server) watchRecord(ctx context.Context, id string, wait time.Duration, done func(*contracts.Record) bool) (*contracts.Record, uint64, bool, error) {
	wake := make(chan struct{}, 1)
	w, stop, err := s.index.watch(ctx, id, wake)
	if err != nil {
		return nil, 0, false, err
	}
	defer stop()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		st, ok := w.state()
		if ok && done(st.rec) {
			return st.rec, st.rev, true, nil
		}
		select {
		case <-wake:
			continue
		case <-timer.C:
		case <-ctx.Done():
		case <-s.done:
		}
		st, ok = w.state()
		return st.rec, st.rev, ok && done(st.rec), nil
	}
}
