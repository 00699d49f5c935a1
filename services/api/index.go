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
	"sync/atomic"
	"time"
	"unique"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// summary is what the index keeps of one record: enough to filter and
// order a listing, nothing more.
type summary struct {
	eventID   string
	rev       uint64 // the bucket revision it was read from
	status    string
	agent     string
	runID     string
	approvers []string // who may vote now; empty means any approver
	createdAt time.Time
	// who is the part of the record that says who may read it (run,
	// approvers, escalation reached, submitter), for approval.CanRead.
	who *readView
	// over is what the oversight figures need (oversight.go).
	over overseen
}

// summaryJSON is the part of a record the index decodes.
type summaryJSON struct {
	Spec            string `json:"spec"`
	Status          string `json:"status"`
	EscalationLevel int    `json:"escalation_level"`
	// Sensitive is what the record's edits add to the request's.
	Sensitive []string `json:"sensitive"`
	overseenJSON
	Request struct {
		EventID    string                     `json:"event_id"`
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

// summarize decodes what the index keeps of record id at revision rev;
// stored is when the bucket stored it (the creation time of records
// that carry none).
func summarize(id string, rev uint64, stored time.Time, value []byte) (*summary, error) {
	var sj summaryJSON
	if err := json.Unmarshal(value, &sj); err != nil {
		return nil, err
	}
	if err := contracts.CheckRecordIdentity(id, sj.Spec, sj.Request.EventID); err != nil {
		return nil, err
	}
	sum := &summary{
		eventID: id, rev: rev, status: sj.Status, agent: sj.Request.Run.Agent, runID: sj.Request.Run.ID,
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
	sum.who = &readView{
		status: sj.Status, escalationLevel: sj.EscalationLevel, sensitive: sj.Sensitive,
		run: sj.Request.Run, quorum: sj.Request.Quorum, escalation: sj.Request.Escalation,
		submitter: sj.Request.Submitter, kind: sj.Request.Kind, requestSensitive: sj.Request.Sensitive,
	}
	sum.who.run.Labels = nil
	if sum.createdAt.IsZero() {
		sum.createdAt = stored
	}
	sum.intern()
	return sum, nil
}

// intern shares the strings that repeat from one summary to the next
// (statuses, agents, approvers, rules, channels): the index holds one copy
// of each, not one per approval.
func (s *summary) intern() {
	s.status, s.agent = intern(s.status), intern(s.agent)
	internAll(s.approvers)
	w := s.who
	w.status, w.submitter, w.kind = s.status, intern(w.submitter), intern(w.kind)
	w.run.Agent, w.run.Tenant, w.run.Owner, w.run.RequestedBy = intern(w.run.Agent), intern(w.run.Tenant), intern(w.run.Owner), intern(w.run.RequestedBy)
	w.quorum.Order = intern(w.quorum.Order)
	internAll(w.quorum.Approvers)
	internAll(w.sensitive)
	internAll(w.requestSensitive)
	for i := range w.escalation {
		w.escalation[i].After = intern(w.escalation[i].After)
		internAll(w.escalation[i].Approvers)
		internAll(w.escalation[i].Channels)
	}
	o := &s.over
	o.rule, o.risk, o.channel, o.execution = intern(o.rule), intern(o.risk), intern(o.channel), intern(o.execution)
	for i := range o.votes {
		o.votes[i].Approver, o.votes[i].Decision = intern(o.votes[i].Approver), intern(o.votes[i].Decision)
	}
	for i := range o.shadow {
		o.shadow[i].Rule, o.shadow[i].Action = intern(o.shadow[i].Rule), intern(o.shadow[i].Action)
	}
	if o.review != nil {
		o.review.Reviewer, o.review.Effect = intern(o.review.Reviewer), intern(o.review.Effect)
	}
}

// intern is the one shared copy of str.
func intern(str string) string {
	if str == "" {
		return ""
	}
	return unique.Make(str).Value()
}

// internAll interns every string of l in place.
func internAll(l []string) {
	for i, str := range l {
		l[i] = intern(str)
	}
}

// readView is what a summary keeps of a record for approval.CanRead and the
// pending quotas: the fields a contracts.Record would hold for them, without
// the rest of that struct (most of a summary's size when it was kept whole).
type readView struct {
	status           string
	escalationLevel  int
	sensitive        []string
	run              contracts.Run
	quorum           contracts.Quorum
	escalation       []contracts.EscalationTier
	submitter, kind  string
	requestSensitive []string
}

// fill writes v into rec, a record of event id with those fields only.
func (v *readView) fill(id string, rec *contracts.Record) {
	*rec = contracts.Record{Status: v.status, EscalationLevel: v.escalationLevel, Sensitive: v.sensitive,
		Request: contracts.ApprovalRequested{
			EventID: id, Run: v.run, Quorum: v.quorum, Escalation: v.escalation,
			Submitter: v.submitter, Kind: v.kind, Sensitive: v.requestSensitive,
		}}
}

// canRead is approval.CanRead of s's record.
func (s *summary) canRead(r approval.Reader) bool {
	if s.who == nil {
		return false
	}
	var rec contracts.Record
	s.who.fill(s.eventID, &rec)
	return approval.CanRead(&rec, r)
}

// DefaultIndexRecent is how many decided records the index keeps beside
// the pending ones, by default.
const DefaultIndexRecent = 20000

// index holds a summary of every pending record and of the most recently
// changed decided ones (at most recent of them), newest first. It is fed
// by one watch of the approvals bucket, which also wakes the requests
// waiting on a record. Older history stays in the bucket only: listings
// that go past what the index holds read it from the bucket's stream
// (archive.go), so memory grows with pending work, not with history.
type index struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	stream jetstream.Stream // the bucket's stream, opened by load
	log    *slog.Logger
	recent int
	// pageBudget replaces archiveBudget when set (Config.HistoryPageBudget).
	pageBudget time.Duration

	mu      sync.Mutex
	byID    map[string]*summary
	order   []*summary // newest first by created_at, then event id descending
	pending int
	// pendingBy counts the pending records by submitter and by tenant,
	// for the pending quotas (budget.go).
	pendingBySubmitter, pendingByTenant map[string]int
	seq                                 uint64        // highest bucket revision applied
	changed                             chan struct{} // closed and replaced whenever seq moves

	// decided counts the decided summaries held; evict lists them by the
	// revision they were applied at, oldest first (entries whose summary
	// has changed since are skipped when reached).
	decided int
	evict   []held
	// archiveTop is the highest revision at or below which decided records
	// may be left out of the index (0: none are): listings continue into
	// the bucket's stream from there.
	archiveTop uint64
	// leftOut is the newest creation time of a decided record left out of
	// the index (zero: none was).
	leftOut time.Time

	// watches of single records, by event id (see watch).
	watches map[string][]*recordWatch
	// observe, when set, is told every change too (a fed record waiter).
	observe func(jetstream.KeyValueEntry)

	watcher jetstream.KeyWatcher
	stopped chan struct{}

	// snapshotPath is where the index keeps its note (snapshot.go; "":
	// nowhere).
	snapshotPath string
	savedSeq     atomic.Uint64 // the revision the last note written holds
	snapshotStop chan struct{}
}

// held is one decided summary in the eviction queue.
type held struct {
	id  string
	rev uint64
}

func newIndex(kv jetstream.KeyValue, js jetstream.JetStream, recent int, log *slog.Logger) *index {
	if recent <= 0 {
		recent = DefaultIndexRecent
	}
	return &index{kv: kv, js: js, recent: recent, log: log, byID: map[string]*summary{}, changed: make(chan struct{}),
		watches: map[string][]*recordWatch{}, pendingBySubmitter: map[string]int{}, pendingByTenant: map[string]int{}}
}

// start loads the index (load.go) and follows the bucket from there.
func (ix *index) start(ctx context.Context) error {
	from, err := ix.load(ctx)
	if err != nil {
		return err
	}
	opts := []jetstream.WatchOpt{}
	if from > 1 {
		opts = append(opts, jetstream.ResumeFromRevision(from))
	}
	w, err := ix.kv.WatchAll(context.WithoutCancel(ctx), opts...)
	if err != nil {
		return fmt.Errorf("api: watch %s: %w", contracts.BucketApprovals, err)
	}
	ix.watcher = w
	ix.stopped = make(chan struct{})
	go ix.run(w)
	if ix.snapshotPath != "" {
		ix.snapshotStop = make(chan struct{})
		go ix.keepSnapshot(ix.snapshotStop)
	}
	return nil
}

func (ix *index) stop() error {
	if ix.watcher == nil {
		return nil
	}
	if ix.snapshotStop != nil {
		close(ix.snapshotStop)
	}
	err := ix.watcher.Stop()
	select {
	case <-ix.stopped:
		// Every change the watch brought is applied: the note holds them.
		if serr := ix.saveSnapshot(); serr != nil {
			ix.log.Warn("the records index note was not written", "err", serr)
		}
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
		var err error
		if sum, err = summarize(e.Key(), e.Revision(), e.Created(), e.Value()); err != nil {
			ix.log.Error("unreadable approval record", "event_id", e.Key(), "err", err)
		}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.putLocked(e.Key(), e.Revision(), sum)
	if e.Revision() > ix.seq {
		ix.seq = e.Revision()
		close(ix.changed)
		ix.changed = make(chan struct{})
	}
}

// putLocked replaces what the index holds of id with sum (nil: nothing)
// as of revision rev, unless it holds a later revision already, and
// keeps at most ix.recent decided summaries.
func (ix *index) putLocked(id string, rev uint64, sum *summary) {
	old := ix.byID[id]
	if old != nil && old.rev > rev {
		return
	}
	if !ix.swapLocked(old, sum) {
		ix.removeLocked(id)
		if sum == nil {
			return
		}
		ix.insertLocked(sum)
	}
	if sum.status == contracts.StatusPending {
		return
	}
	ix.evict = append(ix.evict, held{id: id, rev: rev})
	for ix.decided > ix.recent && len(ix.evict) > 0 {
		h := ix.evict[0]
		ix.evict = ix.evict[1:]
		if s := ix.byID[h.id]; s != nil && s.rev == h.rev && s.status != contracts.StatusPending {
			ix.removeLocked(h.id)
			ix.archiveTop = max(ix.archiveTop, h.rev)
			ix.leftOut = maxTime(ix.leftOut, s.createdAt)
		}
	}
	if cap(ix.evict) > 4*ix.recent && len(ix.evict) < cap(ix.evict)/2 {
		ix.evict = slices.Clone(ix.evict) // let go of the consumed front
	}
}

// leftOutSince is the newest creation time of a decided record the index
// left out (zero when it holds every record): figures over the index are
// complete only for windows that start after it.
func (ix *index) leftOutSince() time.Time {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.leftOut
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// who returns what the index knows of who may read record id, or nil.
func (ix *index) who(id string) *contracts.Record {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if s := ix.byID[id]; s != nil && s.who != nil {
		rec := new(contracts.Record)
		s.who.fill(id, rec)
		return rec
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
	ix.countLocked(s, 1)
}

// swapLocked puts sum in old's place when both sort the same (a record's
// creation time does not change): one slot written instead of the order's
// tail moved twice, on every change of a record the index holds. It
// reports whether it did.
func (ix *index) swapLocked(old, sum *summary) bool {
	if old == nil || sum == nil || compareSummary(old, sum) != 0 {
		return false
	}
	i, found := slices.BinarySearchFunc(ix.order, old, compareSummary)
	if !found || ix.order[i] != old {
		return false
	}
	ix.order[i] = sum
	ix.byID[sum.eventID] = sum
	ix.countLocked(old, -1)
	ix.countLocked(sum, 1)
	return true
}

// countLocked adds d to the counts s is in.
func (ix *index) countLocked(s *summary, d int) {
	if s.status == contracts.StatusPending {
		ix.pending += d
		ix.countPendingLocked(s, d)
	} else {
		ix.decided += d
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
	ix.countLocked(old, -1)
}

// forget drops a record the bucket no longer holds (its age passed the
// retention: such removals are not announced on the watch).
func (ix *index) forget(id string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeLocked(id)
}

// countPendingLocked adds d to the pending counts of s's submitter and
// tenant; a count that reaches zero is dropped.
func (ix *index) countPendingLocked(s *summary, d int) {
	if s.who == nil {
		return
	}
	add := func(m map[string]int, k string) {
		if m[k] += d; m[k] <= 0 {
			delete(m, k)
		}
	}
	if sub := s.who.submitter; sub != "" {
		add(ix.pendingBySubmitter, sub)
	}
	add(ix.pendingByTenant, s.who.run.Tenant)
}

// pendingOf is how many pending records submitter submitted, and how many
// tenant has.
func (ix *index) pendingOf(submitter, tenant string) (bySubmitter, byTenant int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.pendingBySubmitter[submitter], ix.pendingByTenant[tenant]
}

// has reports whether the index holds record id.
func (ix *index) has(id string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.byID[id] != nil
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
	if !s.canRead(f.reader) {
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

// cursor is the position after the last item of a page: in the index
// (created at, event id), or, past it, in the bucket's stream (below: the
// next page lists record messages stored before this sequence).
type cursor struct {
	createdAt time.Time
	eventID   string
	below     uint64
}

func (c cursor) encode() string {
	if c.below > 0 {
		return base64.RawURLEncoding.EncodeToString([]byte("a|" + strconv.FormatUint(c.below, 10)))
	}
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.createdAt.UnixNano(), 10) + "|" + c.eventID))
}

func decodeCursor(s string) (cursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false
	}
	ns, id, ok := strings.Cut(string(raw), "|")
	if ok && ns == "a" {
		below, err := strconv.ParseUint(id, 10, 64)
		if err != nil || below == 0 {
			return cursor{}, false
		}
		return cursor{below: below}, true
	}
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
