package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// recordSubjectPrefix is the subject prefix of the records in the
// approvals bucket's stream; the rest of a subject is the event id.
var recordSubjectPrefix = strings.TrimSuffix(events.RecordSubject("x"), "x")

// scanHeaders calls fn with the headers of every record message stored at
// a sequence in [from, to], in order, through a headers-only ordered push
// consumer on the bucket's stream (the kind a bucket watch uses, so the
// API's grants cover it): no record value crosses the connection. fn runs
// on one goroutine, one message at a time.
func scanHeaders(ctx context.Context, nc *nats.Conn, from, to uint64, fn func(seq uint64, m *nats.Msg)) error {
	if from > to {
		return nil
	}
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	var finished atomic.Bool
	finish := func() {
		if finished.CompareAndSwap(false, true) {
			close(done)
		}
	}
	handler := func(m *nats.Msg) {
		if finished.Load() {
			return
		}
		md, err := m.Metadata()
		if err != nil {
			return
		}
		if seq := md.Sequence.Stream; seq <= to {
			fn(seq, m)
			if seq < to && md.NumPending > 0 {
				return
			}
		}
		finish()
	}
	sub, err := js.Subscribe(recordSubjectPrefix+">", handler, nats.BindStream(events.RecordStream),
		nats.OrderedConsumer(), nats.HeadersOnly(), nats.StartSequence(from), nats.Context(ctx))
	if err != nil {
		return fmt.Errorf("read the headers of %s: %w", events.RecordStream, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if n, err := sub.InitialConsumerPending(); err == nil && n == 0 {
		finish()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mark is a record message the load reads in full: its stream sequence
// and its position among the messages scanned.
type mark struct {
	seq uint64
	pos int
}

// fetchCost is about how many messages a watch delivers in the time of
// one message get (a request and its answer).
const fetchCost = 20

// load fills the index at start. It scans the headers of every record
// (events.RecordHeader: status, created, agent, ...) and reads in full
// only what the index keeps: the pending records and the newest
// ix.recent decided ones (and any record written without the headers).
// The records from the returned revision on are left to the bucket's
// watch, which delivers them in full; those before it are read one by one.
func (ix *index) load(ctx context.Context) (uint64, error) {
	st, err := ix.js.Stream(ctx, events.RecordStream)
	if err != nil {
		return 0, fmt.Errorf("api: open %s: %w", events.RecordStream, err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return 0, nil
	}
	var (
		keep    []mark // pending, and records without the headers
		ring    = make([]mark, 0, min(ix.recent, int(state.Msgs)))
		head    int // the oldest mark in ring, once it is full
		dropped uint64
		n       int
	)
	err = scanHeaders(ctx, ix.js.Conn(), state.FirstSeq, state.LastSeq, func(seq uint64, m *nats.Msg) {
		n++
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return
		}
		sum, ok := events.ParseRecordHeader(m.Header)
		switch {
		case !ok || sum.Status == contracts.StatusPending:
			keep = append(keep, mark{seq: seq, pos: n})
		case len(ring) < cap(ring):
			ring = append(ring, mark{seq: seq, pos: n})
		default:
			dropped = ring[head].seq
			ring[head] = mark{seq: seq, pos: n}
			head = (head + 1) % len(ring)
		}
	})
	if err != nil {
		return 0, fmt.Errorf("api: load the records index: %w", err)
	}
	marks := mergeMarks(keep, append(ring[head:], ring[:head]...))
	from, fetch := splitMarks(marks, n, state.LastSeq)
	if err := ix.fetchSeqs(ctx, st, fetch); err != nil {
		return 0, err
	}
	ix.mu.Lock()
	ix.archiveTop = max(ix.archiveTop, dropped)
	ix.seq = max(ix.seq, from-1)
	ix.mu.Unlock()
	return from, nil
}

// mergeMarks merges two lists ordered by sequence.
func mergeMarks(a, b []mark) []mark {
	out := make([]mark, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].seq < b[0].seq {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// splitMarks picks where the watch starts: the marks before it are read
// one by one, every message from it on is delivered by the watch. It
// takes the cheapest split, n messages in all.
func splitMarks(marks []mark, n int, last uint64) (from uint64, fetch []mark) {
	best, bestCost := len(marks), fetchCost*len(marks)
	for j, m := range marks {
		if cost := fetchCost*j + n - m.pos + 1; cost < bestCost {
			best, bestCost = j, cost
		}
	}
	if best == len(marks) {
		return last + 1, marks
	}
	return marks[best].seq, marks[:best]
}

// fetchSeqs reads the record messages at marks and applies them. A
// message that is gone was replaced by a later revision, which the watch
// delivers.
func (ix *index) fetchSeqs(ctx context.Context, st jetstream.Stream, marks []mark) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, mk := range marks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := ix.fetchSeq(ctx, st, mk.seq)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("api: load the records index: %w", first)
	}
	return nil
}

func (ix *index) fetchSeq(ctx context.Context, st jetstream.Stream, seq uint64) error {
	raw, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	id, ok := strings.CutPrefix(raw.Subject, recordSubjectPrefix)
	if !ok {
		return nil
	}
	if op := raw.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil
	}
	sum, err := summarize(id, raw.Sequence, raw.Time, raw.Data)
	if err != nil {
		ix.log.Error("unreadable approval record", "event_id", id, "err", err)
		return nil
	}
	ix.mu.Lock()
	ix.putLocked(id, raw.Sequence, sum)
	ix.mu.Unlock()
	return nil
}
