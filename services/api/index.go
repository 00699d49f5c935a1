package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// summary is what the index keeps of one record: enough to filter and
// order a listing, nothing more.
type summary struct {
	eventID   string
	status    string
	agent     string
	runID     string
	approvers []string // who may vote now; empty means any approver
	createdAt time.Time
	// who is the part of the record that says who may read it (run,
	// approvers, escalation reached, submitter), for approval.CanRead.
	who *contracts.Record
	// over is what the oversight figures need (oversight.go).
	over overseen
}

// summaryJSON is the part of a record the index decodes.
type summaryJSON struct {
	Status          string `json:"status"`
	EscalationLevel int    `json:"escalation_level"`
	overseenJSON
	Request struct {
		Run        contracts.Run              `json:"run"`
		Quorum     contracts.Quorum           `json:"quorum"`
		Escalation []contracts.EscalationTier `json:"escalation"`
		Submitter  string                     `json:"submitter"`
		Kind       string                     `json:"kind"`
		Sensitive  []string                   `json:"sensitive"`
		CreatedAt  time.Time                  `json:"created_at"`
		overseenRequestJSON
	} `json:"request"`
}

// index holds a summary of every record, newest first, fed by one watch of
// the approvals bucket (initial values, then every change). The same watch
// wakes the requests waiting on a record.
type index struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu      sync.Mutex
	byID    map[string]*summary
	order   []*summary // newest first by created_at, then event id descending
	pending int
	seq     uint64        // highest bucket revision applied
	changed chan struct{} // closed and replaced whenever seq moves

	// watches of single records, by event id (see watch).
	watches map[string][]*recordWatch
	// observe, when set, is told every change too (a fed record waiter).
	observe func(jetstream.KeyValueEntry)

	watcher jetstream.KeyWatcher
	stopped chan struct{}
}

func newIndex(kv jetstream.KeyValue, log *slog.Logger) *index {
	return &index{kv: kv, log: log, byID: map[string]*summary{}, changed: make(chan struct{}), watches: map[string][]*recordWatch{}}
}

func (ix *index) start(ctx context.Context) error {
	w, err := ix.kv.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("api: watch %s: %w", contracts.BucketApprovals, err)
	}
	ix.watcher = w
	ix.stopped = make(chan struct{})
	go ix.run(w)
	return nil
}

func (ix *index) stop() error {
	if ix.watcher == nil {
		return nil
	}
	err := ix.watcher.Stop()
	select {
	case <-ix.stopped:
	case <-time.After(5 * time.Second):
		ix.log.Warn("the approvals watch did not stop in time")
	}
	return err
}

func (ix *index) run(w jetstream.KeyWatcher) {
	defer close(ix.stopped)
	for e := range w.Updates() {
		if e == nil {
			continue // the initial values have all been delivered
		}
		ix.apply(e)
		if e.Operation() == jetstream.KeyValuePut {
			ix.notify(e)
		}
		if ix.observe != nil {
			ix.observe(e) // the process's record waiter: one watch for both
		}
	}
}

func (ix *index) apply(e jetstream.KeyValueEntry) {
	var sum *summary
	if e.Operation() == jetstream.KeyValuePut {
		var sj summaryJSON
		if err := json.Unmarshal(e.Value(), &sj); err != nil {
			ix.log.Error("unreadable approval record", "event_id", e.Key(), "err", err)
		} else {
			sum = &summary{
				eventID: e.Key(), status: sj.Status, agent: sj.Request.Run.Agent, runID: sj.Request.Run.ID,
				approvers: slices.Clone(sj.Request.Quorum.Approvers), createdAt: sj.Request.CreatedAt,
				over: overseenOf(&sj),
			}
			if len(sum.approvers) > 0 {
				for i, tier := range sj.Request.Escalation {
					if i < sj.EscalationLevel {
						sum.approvers = append(sum.approvers, tier.Approvers...)
					}
				}
			}
			sum.who = &contracts.Record{Status: sj.Status, EscalationLevel: sj.EscalationLevel, Request: contracts.ApprovalRequested{
				Run: sj.Request.Run, Quorum: sj.Request.Quorum, Escalation: sj.Request.Escalation, Submitter: sj.Request.Submitter,
				Kind: sj.Request.Kind, Sensitive: sj.Request.Sensitive, EventID: e.Key(),
			}}
			sum.who.Request.Run.Labels = nil
			if sum.createdAt.IsZero() {
				sum.createdAt = e.Created()
			}
		}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeLocked(e.Key())
	if sum != nil {
		ix.insertLocked(sum)
	}
	if e.Revision() > ix.seq {
		ix.seq = e.Revision()
		close(ix.changed)
		ix.changed = make(chan struct{})
	}
}

// who returns what the index knows of who may read record id, or nil.
func (ix *index) who(id string) *contracts.Record {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if s := ix.byID[id]; s != nil {
		return s.who
	}
	return nil
}

func compareSummary(a, b *summary) int {
	if c := b.createdAt.Compare(a.createdAt); c != 0 {
		return c
	}
	return cmp.Compare(b.eventID, a.eventID)
}

func (ix *index) insertLocked(s *summary) {
	i, _ := slices.BinarySearchFunc(ix.order, s, compareSummary)
	ix.order = slices.Insert(ix.order, i, s)
	ix.byID[s.eventID] = s
	if s.status == contracts.StatusPending {
		ix.pending++
	}
}

func (ix *index) removeLocked(id string) {
	old, ok := ix.byID[id]
	if !ok {
		return
	}
	delete(ix.byID, id)
	if i, found := slices.BinarySearchFunc(ix.order, old, compareSummary); found {
		ix.order = slices.Delete(ix.order, i, i+1)
	}
	if old.status == contracts.StatusPending {
		ix.pending--
	}
}

// forget drops a record the bucket no longer holds (its age passed the
// retention: such removals are not announced on the watch).
func (ix *index) forget(id string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeLocked(id)
}

func (ix *index) pendingCount() float64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return float64(ix.pending)
}

// catchUp waits until the index has applied every change the bucket held
// when it was called, so a listing shows every record written before it.
// It gives up at ctx's end and the listing is served from what is there.
func (ix *index) catchUp(ctx context.Context) error {
	st, err := ix.kv.Status(ctx)
	if err != nil {
		return err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil || bs.StreamInfo().State.Msgs == 0 {
		return nil
	}
	last := bs.StreamInfo().State.LastSeq
	for {
		ix.mu.Lock()
		seq, ch := ix.seq, ix.changed
		ix.mu.Unlock()
		if seq >= last {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// listFilter selects records of a listing; empty fields match everything
// but reader, which must be able to read each record.
type listFilter struct {
	reader   approval.Reader
	statuses []string
	agent    string
	runID    string
	idPrefix string
	approver string
}

func (f *listFilter) match(s *summary) bool {
	if s.who == nil || !approval.CanRead(s.who, f.reader) {
		return false
	}
	if len(f.statuses) > 0 && !slices.Contains(f.statuses, s.status) {
		return false
	}
	if f.agent != "" && s.agent != f.agent {
		return false
	}
	if f.runID != "" && s.runID != f.runID {
		return false
	}
	if f.idPrefix != "" && !strings.HasPrefix(s.eventID, f.idPrefix) {
		return false
	}
	if f.approver != "" && len(s.approvers) > 0 && !slices.Contains(s.approvers, f.approver) {
		return false
	}
	return true
}

// cursor is the position after the last item of a page.
type cursor struct {
	createdAt time.Time
	eventID   string
}

func (c cursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.createdAt.UnixNano(), 10) + "|" + c.eventID))
}

func decodeCursor(s string) (cursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false
	}
	ns, id, ok := strings.Cut(string(raw), "|")
	if !ok || !contracts.ValidEventID(id) {
		return cursor{}, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return cursor{}, false
	}
	return cursor{createdAt: time.Unix(0, n), eventID: id}, true
}

// page returns the event ids of up to limit matching records after the
// cursor (from the newest when nil), and the cursor of the next page if
// more records match.
func (ix *index) page(f listFilter, after *cursor, limit int) (ids []string, next *cursor) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	start := 0
	if after != nil {
		key := &summary{createdAt: after.createdAt, eventID: after.eventID}
		i, found := slices.BinarySearchFunc(ix.order, key, compareSummary)
		if found {
			i++
		}
		start = i
	}
	var last *summary
	for _, s := range ix.order[start:] {
		if !f.match(s) {
			continue
		}
		if len(ids) == limit {
			return ids, &cursor{createdAt: last.createdAt, eventID: last.eventID}
		}
		ids = append(ids, s.eventID)
		last = s
	}
	return ids, nil
}
