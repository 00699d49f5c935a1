package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// recordSubjectPrefix is the subject prefix of the records in the
// approvals bucket's stream; the rest of a subject is the event id.
var recordSubjectPrefix = strings.TrimSuffix(events.RecordSubject("x"), "x")

// scanHeaders calls fn with the headers of every record message stored at
// a sequence in [from, to], in order, through a headers-only push consumer
// on the bucket's stream (the kind a bucket watch uses, so the API's grants
// cover it): no record value crosses the connection. fn runs on one
// goroutine, one message at a time.
//
// To the stream's end (the load), the consumer is an ordered one. For a
// range below the end (older history), it is one whose deliveries are
// never acknowledged and at most to-from+1 may be outstanding: the server
// stops once it has sent the range, instead of streaming the newer
// history after it until the consumer is gone.
func scanHeaders(ctx context.Context, nc *nats.Conn, from, to uint64, fn func(seq uint64, m *nats.Msg)) error {
	return scanHeadersUpTo(ctx, nc, from, to, false, fn)
}

// scanRangeHeaders is scanHeaders for a range that ends below the stream's
// last message.
func scanRangeHeaders(ctx context.Context, nc *nats.Conn, from, to uint64, fn func(seq uint64, m *nats.Msg)) error {
	return scanHeadersUpTo(ctx, nc, from, to, true, fn)
}

func scanHeadersUpTo(ctx context.Context, nc *nats.Conn, from, to uint64, bounded bool, fn func(seq uint64, m *nats.Msg)) error {
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
		seq, pending, ok := ackPosition(m.Reply)
		if !ok {
			return
		}
		if seq <= to {
			fn(seq, m)
			if seq < to && pending > 0 {
				return
			}
		}
		finish()
	}
	// No filter: the stream holds records only, and a filter would make
	// the server match every subject of the stream when it counts pending.
	opts := []nats.SubOpt{nats.BindStream(events.RecordStream), nats.HeadersOnly(), nats.StartSequence(from), nats.Context(ctx)}
	if bounded {
		n := min(to-from+1, math.MaxInt32)
		opts = append(opts, nats.AckExplicit(), nats.ManualAck(), nats.MaxAckPending(int(n)),
			nats.InactiveThreshold(time.Minute))
	} else {
		opts = append(opts, nats.OrderedConsumer())
	}
	sub, err := js.Subscribe("", handler, opts...)
	if err != nil {
		return fmt.Errorf("read the headers of %s: %w", events.RecordStream, err)
	}
	// Deleting the consumer is a request of its own (a replicated one on a
	// cluster): it runs after the answer, and the handler ignores whatever
	// arrives meanwhile.
	defer func() { go func() { _ = sub.Unsubscribe() }() }()
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

// ackPosition reads the stream sequence and the messages still pending
// from a JetStream delivery's reply subject, as nats.Msg.Metadata does,
// without its allocations (the load reads a million of them):
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>,
// or the same after a domain and account hash, with a token more.
func ackPosition(reply string) (seq, pending uint64, ok bool) {
	rest, found := strings.CutPrefix(reply, "$JS.ACK.")
	if !found {
		return 0, 0, false
	}
	var tok [12]string
	n := 0
	for n < len(tok) {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			tok[n] = rest
			n++
			break
		}
		tok[n], rest = rest[:i], rest[i+1:]
		n++
	}
	var sseq, pend string
	switch n {
	case 7: // stream, consumer, delivered, sseq, cseq, time, pending
		sseq, pend = tok[3], tok[6]
	case 9, 10: // domain, account hash, stream, consumer, delivered, sseq, cseq, time, pending[, random]
		sseq, pend = tok[5], tok[8]
	default:
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(sseq, 10, 64)
	p, err2 := strconv.ParseUint(pend, 10, 64)
	return s, p, err1 == nil && err2 == nil
}

// fetchBudget is how many records the load reads one by one (message
// gets by sequence, issued while the scan goes by, when the server has
// the message at hand) before it leaves the rest to the watch.
const fetchBudget = 20000

// load fills the index at start. It scans the headers of every record
// (events.RecordHeader: status, created, agent, ...) and reads in full
// only what the index keeps: the pending records (and any record written
// without the headers), read one by one as the scan finds them, and the
// newest ix.recent decided ones, which the bucket's watch delivers from
// the returned revision on. Past fetchBudget pending records the watch
// starts at the first one not read instead.
func (ix *index) load(ctx context.Context) (uint64, error) {
	st, err := ix.js.Stream(ctx, events.RecordStream)
	if err != nil {
		return 0, fmt.Errorf("api: open %s: %w", events.RecordStream, err)
	}
	ix.stream = st // message gets here and by older-history listings
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return 0, nil
	}
	if from, ok, err := ix.loadSnapshot(ctx, st.CachedInfo()); err != nil || ok {
		return from, err
	}
	began := time.Now()
	f := newFetcher(ctx, ix)
	scan := &loadScan{ring: make([]decidedMark, 0, min(ix.recent, int(state.Msgs)))}
	err = scanHeaders(ctx, ix.js.Conn(), state.FirstSeq, state.LastSeq, func(seq uint64, m *nats.Msg) { scan.see(seq, m, f) })
	if ferr := f.wait(); err == nil {
		err = ferr
	}
	if err != nil {
		return 0, fmt.Errorf("api: load the records index: %w", err)
	}
	from := scan.from(state.LastSeq)
	ix.mu.Lock()
	ix.archiveTop = max(ix.archiveTop, scan.dropped)
	if scan.leftOut > 0 {
		ix.leftOut = maxTime(ix.leftOut, time.Unix(0, scan.leftOut))
	}
	ix.seq = max(ix.seq, from-1)
	ix.mu.Unlock()
	ix.log.Info("records index loaded from the bucket's headers", "records", scan.n, "read_one_by_one", f.n,
		"watched_from", from, "took", time.Since(began).Round(time.Millisecond))
	return from, nil
}

// loadScan is what the load's scan found.
type loadScan struct {
	ring    []decidedMark // the newest decided records, a ring
	head    int           // the oldest in ring, once it is full
	dropped uint64        // the newest decided record pushed out of ring
	leftOut int64         // the newest creation (Unix ns) among those
	n       int           // messages scanned
	unread  uint64        // the first record to keep that was not read
}

// decidedMark is a decided record the scan saw.
type decidedMark struct {
	seq     uint64
	created int64 // Unix ns; 0 when its headers do not tell
}

func (p *loadScan) see(seq uint64, m *nats.Msg, f *fetcher) {
	p.n++
	if deletion(m.Header) {
		return
	}
	switch status := m.Header.Get(events.HeaderRecordStatus); status {
	case "", contracts.StatusPending:
		if p.unread == 0 && !f.fetch(seq) {
			p.unread = seq
		}
	default:
		created, _ := strconv.ParseInt(m.Header.Get(events.HeaderRecordCreated), 10, 64)
		mk := decidedMark{seq: seq, created: created}
		if len(p.ring) < cap(p.ring) {
			p.ring = append(p.ring, mk)
			return
		}
		old := p.ring[p.head]
		p.dropped, p.leftOut = old.seq, max(p.leftOut, old.created)
		p.ring[p.head] = mk
		p.head = (p.head + 1) % len(p.ring)
	}
}

// from is where the watch starts: the oldest of the newest decided
// records, or the first record to keep that was not read, if earlier.
func (p *loadScan) from(last uint64) uint64 {
	from := last + 1
	if len(p.ring) > 0 {
		from = p.ring[p.head].seq
	}
	if p.unread > 0 {
		from = min(from, p.unread)
	}
	return from
}

// fetcher reads records by sequence, up to 32 at once, while the scan
// goes on. fetch is called from the scan's one goroutine.
type fetcher struct {
	ctx    context.Context
	ix     *index
	sem    chan struct{}
	wg     sync.WaitGroup
	n      int // reads started
	budget int // reads it may start; -1: no bound

	mu    sync.Mutex
	first error
}

func newFetcher(ctx context.Context, ix *index) *fetcher {
	return &fetcher{ctx: ctx, ix: ix, sem: make(chan struct{}, 32), budget: fetchBudget}
}

// fetch starts reading the record at seq; false once the budget is spent.
func (f *fetcher) fetch(seq uint64) bool {
	if f.budget >= 0 && f.n == f.budget {
		return false
	}
	f.n++
	f.sem <- struct{}{}
	f.wg.Go(func() {
		defer func() { <-f.sem }()
		if err := f.ix.fetchSeq(f.ctx, seq); err != nil {
			f.mu.Lock()
			if f.first == nil {
				f.first = err
			}
			f.mu.Unlock()
		}
	})
	return true
}

func (f *fetcher) wait() error {
	f.wg.Wait()
	return f.first
}

func (ix *index) fetchSeq(ctx context.Context, seq uint64) error {
	sum, err := ix.summaryAt(ctx, seq)
	if sum == nil || err != nil {
		return err
	}
	ix.mu.Lock()
	ix.putLocked(sum.eventID, sum.rev, sum)
	ix.mu.Unlock()
	return nil
}

// summaryAt reads the record message at seq: nil when it is gone (a later
// revision replaced it), a deletion or unreadable (logged).
func (ix *index) summaryAt(ctx context.Context, seq uint64) (*summary, error) {
	raw, err := ix.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	id, ok := strings.CutPrefix(raw.Subject, recordSubjectPrefix)
	if !ok || deletion(raw.Header) {
		return nil, nil
	}
	sum, err := summarize(id, raw.Sequence, raw.Time, raw.Data)
	if err != nil {
		ix.log.Error("unreadable approval record", "event_id", id, "err", err)
		return nil, nil
	}
	return sum, nil
}

// deletion reports whether a bucket message's headers mark a deleted or
// purged key.
func deletion(h nats.Header) bool {
	op := h.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}
