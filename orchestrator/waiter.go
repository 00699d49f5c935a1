package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// WaitFunc is told about a record each time it changes (and once at the
// start, if the record exists). It returns true when it has seen what it
// was waiting for; it is then not called again. It runs on the waiter's
// dispatch goroutine and must not block. The record is shared with the
// other waits of the process (each revision is decoded once) and must not
// be modified.
type WaitFunc func(rec *contracts.Record, revision uint64) (done bool)

// waitHandler is what a wait calls: changed with its record (a WaitFunc),
// and decided with the arbiter's decided announcement of its record
// (hitl.approval.decided.<event_id>), which answers the wait without
// reading the record. decided reports true when the announcement, with
// what the wait knew when it began, answers it (the wait is then over), and
// false when it cannot: the record is then read and handed to changed as
// before. Only waits that need the decision alone answer announcements
// (the gate's reviews and questions; a WaitFunc alone is a recordFunc,
// which answers none); the waiter hands decided only announcements that
// are well formed, name the record waited on, carry a terminal status and
// an outcome and a revision newer than any the wait has seen, and that came
// from the arbiter: only the arbiter's NATS user may publish on
// hitl.approval.decided.> (events/embedded/roles.go, deploy/), and the
// arbiter announces a record's decision once, after its terminal write is
// stored.
type waitHandler interface {
	changed(rec *contracts.Record, revision uint64) (done bool)
	decided(d *contracts.Decided) (answered bool)
}

// recordFunc is the waitHandler of a wait that takes records only.
type recordFunc WaitFunc

func (f recordFunc) changed(rec *contracts.Record, rev uint64) bool { return f(rec, rev) }
func (recordFunc) decided(*contracts.Decided) bool                  { return false }

// Waiter matches changes of approval records to the runs waiting for them.
// A wait is a map entry and a callback, with no goroutine and no JetStream
// consumer of its own. How the waiter learns of changes depends on how it
// was made:
//
//   - NewWaiter subscribes, for each record waited on, to the server's
//     copies of the record's writes (hitl.approval.record.<event_id>, one
//     plain NATS subscription, where the bucket republishes its writes):
//     the write itself wakes the wait, with no read and no announcement
//     on the way; a decided record answers the gate's reviews and
//     questions from its decision's few fields, as a decided announcement
//     would. On a bucket that does not republish (provisioned by an
//     earlier release) it subscribes instead to the arbiter's
//     announcements of that record (hitl.approval.created.<event_id>,
//     hitl.approval.changed.<event_id> and hitl.approval.decided.<event_id>,
//     plain NATS subscriptions; a wait that looks only for the decision,
//     WatchDecided, follows the decided announcement alone) and reads
//     the record when one arrives. The gate's reviews and questions are
//     answered from the decided announcement itself, which carries the
//     decision (status, outcome, revision), without that read (see
//     waitHandler). The server sends a process only what concerns its own
//     waits, so a fleet of agent processes costs the same per decision as
//     one.
//   - NewBucketWaiter holds one watch of the whole approvals bucket: every
//     change of every record reaches the process.
//   - NewFedWaiter is told the changes by a watch the process already holds.
type Waiter struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu    sync.Mutex
	waits map[string][]*wait

	watchMu sync.Mutex
	watcher jetstream.KeyWatcher
	closed  bool
	running sync.WaitGroup

	// statuses tells of reconnects of nc without touching its handlers.
	nc       *nats.Conn
	statuses chan nats.Status
	// fed waiters have no watch of their own (NewFedWaiter).
	fed bool
	// keyed waiters subscribe per record (NewWaiter): subs holds the
	// announcement subscriptions of each record waited on; follows numbers
	// them (keySubs.gen).
	keyed   bool
	subs    map[string]*keySubs
	follows uint64
	// ann takes a keyed waiter's announcements (announcements.go).
	ann *announceQueue
	// copies is set when the bucket republishes every record write
	// (contracts.SubjectRecordPrefix): a keyed waiter then follows those
	// copies of the records it waits on instead of their announcements,
	// and is woken by the write itself.
	copies bool
	// decoded keeps the last revision decoded of each record.
	decoded decodedRecords

	// answered counts the waits answered from a decided announcement;
	// reads the reads of an announced record (rereadAfter).
	answered, reads atomic.Uint64
}

// wait is one registered wait: one allocation, whatever it holds.
type wait struct {
	w   *Waiter
	key string
	h   waitHandler
	// finished is set once, under Waiter.mu, and read without it by the
	// wait's own callback.
	finished atomic.Bool

	// Calls from the registration's read and from the announcements are
	// serialized by mu, and never go back: a revision older than one the
	// wait has seen (reads racing, one started before the wait registered)
	// is not handed to it. A change that arrives before the registration's
	// own read (ready) is kept in early, and the newer of the two is
	// handed over first. over is set once fn or dfn reported the wait
	// done: neither is called again, whichever path comes next.
	ready bool
	over  bool
	mu    sync.Mutex
	last  uint64
	early *earlyChange
}

// earlyChange is a change handed to a wait before it began.
type earlyChange struct {
	rec *contracts.Record
	rev uint64
}

// changed hands the wait a record change and reports whether it is done.
func (wt *wait) changed(rec *contracts.Record, rev uint64) bool {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if wt.over || wt.finished.Load() {
		return true
	}
	if !wt.ready {
		if wt.early == nil || rev > wt.early.rev {
			wt.early = &earlyChange{rec: rec, rev: rev}
		}
		return false
	}
	if rev < wt.last {
		return false
	}
	wt.last = rev
	wt.over = wt.h.changed(rec, rev)
	return wt.over
}

// decided hands the wait a decided announcement d. ok is false when the
// wait needs its record read instead: it takes records only, it has not
// begun (the record its registration read is not handed yet), it has seen
// revision d.Revision or a newer one, or its handler could not answer
// (a recordFunc never does).
func (wt *wait) decided(d *contracts.Decided) (ok bool) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if wt.over || wt.finished.Load() {
		return true
	}
	if !wt.ready || d.Revision <= wt.last || !wt.h.decided(d) {
		return false
	}
	wt.last, wt.over = d.Revision, true
	return true
}

// start hands the wait the record as its registration read it (nil when
// there is none yet); until then changed only keeps the newest change.
func (wt *wait) start(rec *contracts.Record, rev uint64) bool {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.ready = true
	if wt.over || wt.finished.Load() {
		return true
	}
	if wt.early != nil && wt.early.rev > rev {
		rec, rev = wt.early.rec, wt.early.rev
	}
	wt.early = nil
	if rec == nil {
		return false
	}
	wt.last = rev
	wt.over = wt.h.changed(rec, rev)
	return wt.over
}

// NewWaiter opens the approvals bucket; each wait then follows its own
// record: the server's copies of the record's writes where the bucket
// republishes them (as events.Provision configures it), else the record's
// announcements. Stop it with Close. Its NATS user must be allowed to
// subscribe to hitl.approval.record.>, hitl.approval.changed.> and
// hitl.approval.decided.> (the orchestrator role of deploy/ is).
func NewWaiter(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Waiter, error) {
	w, err := newWaiter(ctx, js, log, true)
	if err != nil {
		return nil, err
	}
	w.fed, w.keyed, w.subs = false, true, map[string]*keySubs{}
	w.copies = republishesRecords(ctx, js) && mayFollowCopies(js.Conn())
	w.ann = newAnnounceQueue(w)
	return w, nil
}

// mayFollowCopies reports whether the connection's NATS user may subscribe
// to the record copies: a user configured before they existed may not, and
// its waits follow the announcements instead of never hearing of a
// decision. It subscribes to one copy subject and makes a round trip: a
// refusal is back by then.
func mayFollowCopies(nc *nats.Conn) bool {
	probe := contracts.RecordCopySubject("permission-probe-" + nats.NewInbox()[len(nats.InboxPrefix):])
	sub, err := nc.SubscribeSync(probe)
	if err != nil {
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		return false
	}
	last := nc.LastError()
	return last == nil || !errors.Is(last, nats.ErrPermissionViolation) || !strings.Contains(last.Error(), probe)
}

// republishesRecords reports whether the approvals bucket republishes its
// writes on contracts.SubjectRecordPrefix (events.Provision configures it
// so); a bucket provisioned by an earlier release does not, and its waits
// follow the announcements instead. A bucket that cannot be read is taken
// not to.
func republishesRecords(ctx context.Context, js jetstream.JetStream) bool {
	st, err := js.Stream(ctx, "KV_"+contracts.BucketApprovals)
	if err != nil {
		return false
	}
	rp := st.CachedInfo().Config.RePublish
	return rp != nil && !rp.HeadersOnly && rp.Destination == contracts.SubjectRecordPrefix+">" &&
		rp.Source == "$KV."+contracts.BucketApprovals+".>"
}

// NewBucketWaiter opens the approvals bucket and watches all of it, for a
// NATS user without the subscriptions NewWaiter needs. Stop it with Close.
func NewBucketWaiter(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Waiter, error) {
	return newWaiter(ctx, js, log, false)
}

// NewFedWaiter is a waiter without a watch of its own, for a process that
// already watches the whole approvals bucket (the HTTP API's listing
// index): that watch hands it every record change with Observe, so the
// process watches the bucket once. Reads after a wait registers, and
// re-reads after a reconnect, work as with NewWaiter.
func NewFedWaiter(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Waiter, error) {
	return newWaiter(ctx, js, log, true)
}

// Observe hands the waiter a change of the approvals bucket from the
// process's own watch (see NewFedWaiter).
func (w *Waiter) Observe(e jetstream.KeyValueEntry) {
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return
	}
	w.observe(e.Key(), e.Value(), e.Revision())
}

func newWaiter(ctx context.Context, js jetstream.JetStream, log *slog.Logger, fed bool) (*Waiter, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: open bucket %s: %w", contracts.BucketApprovals, err)
	}
	w := &Waiter{kv: kv, log: log, waits: map[string][]*wait{}, fed: fed}
	if !fed {
		if err := w.startWatch(ctx); err != nil {
			return nil, err
		}
	}
	// After a reconnect the watch is replaced at once and every pending wait
	// re-reads its record, instead of waiting for the old watch to notice
	// missed heartbeats. A status listener leaves the handlers of the
	// connection, which the caller owns, as they are.
	nc := js.Conn()
	w.statuses, w.nc = nc.StatusChanged(nats.CONNECTED), nc
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		for range w.statuses {
			w.reconnected()
		}
	}()
	return w, nil
}

// startWatch replaces the watch with a new one that delivers changes from now on.
func (w *Waiter) startWatch(ctx context.Context) error {
	// Only changes from now on: every wait reads its record once after it
	// registers, which covers everything that happened before.
	watcher, err := w.kv.WatchAll(context.WithoutCancel(ctx), jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("orchestrator: watch %s: %w", contracts.BucketApprovals, err)
	}
	w.watchMu.Lock()
	defer w.watchMu.Unlock()
	if w.closed {
		_ = watcher.Stop()
		return nil
	}
	old := w.watcher
	w.watcher = watcher
	w.running.Add(1)
	go w.dispatch(watcher)
	if old != nil {
		_ = old.Stop()
	}
	return nil
}

// reconnected renews the watch and re-reads every pending wait's record.
// It is called on reconnects of the waiter's connection.
func (w *Waiter) reconnected() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if w.fed || w.keyed {
		// Subscriptions are renewed by the connection itself.
		w.recheck(ctx)
		return
	}
	if err := w.startWatch(ctx); err != nil {
		w.log.Warn("renewing the approvals watch failed; the old watch recovers on its own", "err", err)
	}
	w.recheck(ctx)
}

// Close stops the watch. Pending waits are never called again.
func (w *Waiter) Close() error {
	w.nc.RemoveStatusListener(w.statuses) // closes the channel: the listener ends
	w.watchMu.Lock()
	w.closed = true
	var err error
	if w.watcher != nil {
		err = w.watcher.Stop()
	}
	w.watchMu.Unlock()
	if w.keyed {
		w.mu.Lock()
		for key, ks := range w.subs {
			ks.unsubscribe()
			delete(w.subs, key)
		}
		w.mu.Unlock()
		w.ann.close()
	}
	w.running.Wait()
	return err
}

// isClosed reports whether Close was called.
func (w *Waiter) isClosed() bool {
	w.watchMu.Lock()
	defer w.watchMu.Unlock()
	return w.closed
}

func (w *Waiter) dispatch(watcher jetstream.KeyWatcher) {
	defer w.running.Done()
	for e := range watcher.Updates() {
		w.Observe(e)
	}
}

// observe delivers a record change to the waits on its key.
func (w *Waiter) observe(key string, value []byte, rev uint64) {
	w.mu.Lock()
	_, waiting := w.waits[key]
	w.mu.Unlock()
	if !waiting {
		return
	}
	rec, err := w.decoded.decode(key, value, rev)
	if err != nil {
		w.log.Error("unreadable approval record", "event_id", key, "err", err)
		return
	}
	w.deliver(key, rec, rev)
}

// deliver calls every unfinished wait on key and drops the finished ones.
func (w *Waiter) deliver(key string, rec *contracts.Record, rev uint64) {
	w.mu.Lock()
	// A copy: finish removes waits from the list in place.
	list := slices.Clone(w.waits[key])
	w.mu.Unlock()
	for _, wt := range list {
		if wt.finished.Load() {
			continue
		}
		if wt.changed(rec, rev) {
			w.finish(key, wt)
		}
	}
}

func (w *Waiter) finish(key string, wt *wait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.finished.Swap(true) {
		return
	}
	list := w.waits[key]
	for i, x := range list {
		if x == wt {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(w.waits, key)
		if w.keyed {
			if ks := w.subs[key]; ks != nil {
				ks.unsubscribe()
			}
			delete(w.subs, key)
		}
	} else {
		w.waits[key] = list
	}
}

// Announcements a keyed waiter can follow for a record.
type announcements uint8

const (
	onCreated announcements = 1 << iota
	onChanged
	onDecided
	// onRecord follows the server's copies of the record's writes, which
	// tell everything the three announcements do.
	onRecord
	onAll = onCreated | onChanged | onDecided
)

// subject is the subject of the one announcement kind a.
func (a announcements) subject(key string) string {
	switch a {
	case onCreated:
		return contracts.CreatedSubject(key)
	case onChanged:
		return contracts.ChangedSubject(key)
	case onRecord:
		return contracts.RecordCopySubject(key)
	}
	return contracts.DecidedSubject(key)
}

// keySubs are a keyed waiter's subscriptions to one record's announcements.
type keySubs struct {
	on   announcements
	subs [4]*nats.Subscription // by kind, as many as on has
	// gen numbers the key's subscriptions, so that a read started by an
	// earlier subscription of the key (its waits finished, new ones
	// registered since) hands them nothing; seen is the newest revision
	// read of the record, so that two reads racing never hand a wait an
	// older record after a newer one.
	gen, seen uint64
}

func (ks *keySubs) unsubscribe() {
	for _, s := range ks.subs {
		if s != nil {
			_ = s.Unsubscribe()
		}
	}
}

// genOf is the generation of key's subscriptions (0: none); w.mu is held.
func (w *Waiter) genOf(key string) uint64 {
	if ks := w.subs[key]; ks != nil {
		return ks.gen
	}
	return 0
}

// follow subscribes a keyed waiter to key's announcements of the kinds in
// on that it does not follow yet. Called with w.mu held, before the wait
// reads its record: an announcement that lands after the subscription is
// seen, one before is covered by the read.
func (w *Waiter) follow(key string, on announcements) error {
	if !w.keyed {
		return nil
	}
	if w.copies {
		on = onRecord
	}
	ks := w.subs[key]
	if ks != nil && ks.on&on == on {
		return nil
	}
	if ks == nil {
		w.follows++
		ks = &keySubs{gen: w.follows}
		w.subs[key] = ks
	}
	for i, kind := 0, onCreated; kind <= onRecord; i, kind = i+1, kind<<1 {
		if on&kind == 0 || ks.on&kind != 0 {
			continue
		}
		s, err := w.ann.subscribe(w.nc, kind.subject(key))
		if err != nil {
			if ks.on == 0 {
				delete(w.subs, key)
			}
			return fmt.Errorf("orchestrator: follow %s: %w", kind.subject(key), err)
		}
		ks.on |= kind
		ks.subs[i] = s
	}
	return nil
}

// A read of an announced record that failed is tried again after
// rereadFirstRetry, then at doubling intervals up to rereadMaxRetry, while
// the record is waited on: the decision is announced once, so a read lost
// to a passing failure (a timeout, a leader election) must not leave its
// waits to their deadlines.
const (
	rereadFirstRetry = 50 * time.Millisecond
	rereadMaxRetry   = 5 * time.Second
)

// announced takes an announcement of key's record: a decided one (data is
// its body) answers the waits it can (answer), and the record is read for
// the others, as for any other announcement.
func (w *Waiter) announced(key string, data []byte) {
	if data != nil && w.answer(key, data) {
		return
	}
	w.rereadCurrent(key)
}

// recordDecision is what a record copy tells a decided announcement would:
// decoded without the rest of the record.
type recordDecision struct {
	Spec    string `json:"spec"`
	Request struct {
		EventID string `json:"event_id"`
	} `json:"request"`
	Status  string             `json:"status"`
	Outcome *contracts.Outcome `json:"outcome"`
}

// recorded takes the server's copy of a write of key's record at rev. A
// decided record answers the waits it can as its decided announcement
// would (answerDecided), from the few fields that takes; the waits it does
// not answer get the whole record, as do those that take every change
// (Watch). A record still pending concerns no other wait.
func (w *Waiter) recorded(key string, data []byte, rev uint64, pending bool) {
	if pending && !w.takesEveryChange(key) {
		return // not decided, by its summary header: nothing to decode
	}
	var d recordDecision
	if err := json.Unmarshal(data, &d); err == nil && contracts.CheckRecordIdentity(key, d.Spec, d.Request.EventID) == nil &&
		decidedStatus(d.Status) && d.Outcome != nil {
		if w.answerDecided(key, &contracts.Decided{Spec: contracts.SpecDecided, EventID: key, Status: d.Status,
			Outcome: d.Outcome, Revision: rev}) {
			return
		}
	} else if !w.takesEveryChange(key) {
		return
	}
	w.observe(key, data, rev)
}

// takesEveryChange reports whether a wait on key takes records only (a
// Watch or WatchDecided), not decisions alone.
func (w *Waiter) takesEveryChange(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(w.waits[key], func(wt *wait) bool { _, plain := wt.h.(recordFunc); return plain })
}

// answer hands the decided announcement data of key's record to the waits
// on key, and reports whether it answered every one of them. It answers
// none, and the record is read, when the announcement is not one the
// arbiter would send for a decision of this record: unreadable, another
// spec or event id, a status that is not one of the terminal statuses, no
// outcome, or a revision not newer than one read for the key already.
func (w *Waiter) answer(key string, data []byte) bool {
	w.mu.Lock()
	list := slices.Clone(w.waits[key])
	w.mu.Unlock()
	if !slices.ContainsFunc(list, func(wt *wait) bool { _, plain := wt.h.(recordFunc); return !plain }) {
		return false
	}
	var d contracts.Decided
	if err := contracts.Decode(data, &d); err != nil || d.Spec != contracts.SpecDecided || d.EventID != key ||
		!decidedStatus(d.Status) || d.Outcome == nil || d.Revision == 0 {
		w.log.Warn("a decided announcement the waiter cannot take; reading the record", "event_id", key, "err", err)
		return false
	}
	return w.answerDecided(key, &d)
}

// answerDecided hands d, the decision of key's record, to the waits on key
// that can take it, and reports whether it answered every one of them.
func (w *Waiter) answerDecided(key string, d *contracts.Decided) bool {
	w.mu.Lock()
	list := slices.Clone(w.waits[key])
	ks := w.subs[key]
	stale := ks == nil || d.Revision <= ks.seen
	w.mu.Unlock()
	if stale {
		return false
	}
	all := true
	for _, wt := range list {
		if wt.finished.Load() {
			continue
		}
		// Counted before the wait is handed the decision, which may reach
		// its caller at once: whoever reads the count after the answer
		// finds it; taken back when the wait could not take it.
		w.answered.Add(1)
		if !wt.decided(d) {
			w.answered.Add(^uint64(0))
			all = false
			continue
		}
		w.finish(key, wt)
	}
	return all
}

// decidedStatus reports whether status is one a decision leaves a record in.
func decidedStatus(status string) bool {
	switch status {
	case contracts.StatusApproved, contracts.StatusRejected, contracts.StatusResponded,
		contracts.StatusAnswered, contracts.StatusExpired, contracts.StatusCancelled:
		return true
	}
	return false
}

// rereadCurrent reads key's record after an announcement and hands it to
// the waits on it.
func (w *Waiter) rereadCurrent(key string) {
	w.mu.Lock()
	gen := w.genOf(key)
	w.mu.Unlock()
	w.rereadAfter(key, gen, rereadFirstRetry)
}

// rereadAfter is reread, which on a failed read tries again after retry.
func (w *Waiter) rereadAfter(key string, gen uint64, retry time.Duration) {
	w.mu.Lock()
	_, waiting := w.waits[key]
	current := w.genOf(key) == gen
	w.mu.Unlock()
	if !waiting || !current || w.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.reads.Add(1)
	e, err := w.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		w.log.Warn("an announced approval record is not in the bucket", "event_id", key, "err", err)
		return
	}
	if err != nil {
		w.log.Warn("reading an announced approval record failed; reading it again", "event_id", key, "err", err, "retry_in", retry)
		time.AfterFunc(retry, func() { w.rereadAfter(key, gen, min(2*retry, rereadMaxRetry)) })
		return
	}
	w.mu.Lock()
	ks := w.subs[key]
	stale := ks == nil || ks.gen != gen || e.Revision() <= ks.seen
	if !stale {
		ks.seen = e.Revision()
	}
	w.mu.Unlock()
	if stale {
		return
	}
	rec, err := w.decoded.decode(key, e.Value(), e.Revision())
	if err != nil {
		w.log.Error("unreadable approval record", "event_id", key, "err", err)
		return
	}
	w.deliver(key, rec, e.Revision())
}

// Watch calls fn with the record eventID now and on every change until fn
// returns true or cancel is called. The registration comes before the
// read, so a change that lands in between is seen by one or the other.
func (w *Waiter) Watch(ctx context.Context, eventID string, fn WaitFunc) (cancel func(), err error) {
	return w.watch(ctx, eventID, onAll, fn)
}

// WatchDecided is Watch for a wait that only looks for a terminal record:
// fn is called with the record now, and then at least when it is decided,
// but may miss changes that leave it pending. A waiter made by NewWaiter
// then follows only the record's decided announcement (every terminal
// record has one), not its created and changed announcements, which saves
// a subscription and a read of the record for each of them.
func (w *Waiter) WatchDecided(ctx context.Context, eventID string, fn WaitFunc) (cancel func(), err error) {
	return w.watch(ctx, eventID, onDecided, fn)
}

// watchDecision is WatchDecided for a wait that h's decided may answer
// from the record's decided announcement (see waitHandler); h's changed is
// called with the record as WatchDecided calls its WaitFunc, when the wait
// begins and whenever the announcement cannot answer the wait.
func (w *Waiter) watchDecision(ctx context.Context, eventID string, h waitHandler) (cancel func(), err error) {
	return w.watchWith(ctx, eventID, onDecided, h)
}

// watch is Watch for a keyed waiter that follows the announcements in on.
func (w *Waiter) watch(ctx context.Context, eventID string, on announcements, fn WaitFunc) (cancel func(), err error) {
	return w.watchWith(ctx, eventID, on, recordFunc(fn))
}

// watchWith is watch with a waitHandler.
func (w *Waiter) watchWith(ctx context.Context, eventID string, on announcements, h waitHandler) (cancel func(), err error) {
	wt, err := w.arm(eventID, on, h)
	if err != nil {
		return nil, err
	}
	if err := w.check(ctx, eventID, wt); err != nil {
		wt.cancel()
		return nil, err
	}
	return wt.cancel, nil
}

// arm registers fn as a wait on eventID, following the announcements in on,
// without reading the record: the caller reads it afterwards, so a change
// that lands in between is seen by the read or by the wait. The wait calls
// fn from begin on (before, it keeps the newest change it is handed, the
// caller's read included); cancel ends it. h's decided may answer the
// wait from the record's decided announcement (see waitHandler).
func (w *Waiter) arm(eventID string, on announcements, h waitHandler) (*wait, error) {
	wt := &wait{w: w, key: eventID, h: h}
	w.mu.Lock()
	w.waits[eventID] = append(w.waits[eventID], wt)
	err := w.follow(eventID, on)
	w.mu.Unlock()
	if err != nil {
		wt.cancel()
		return nil, err
	}
	return wt, nil
}

// cancel ends the wait; fn is never called again.
func (wt *wait) cancel() { wt.w.finish(wt.key, wt) }

// begin starts a wait from arm with the newest record it was handed.
func (wt *wait) begin() {
	if wt.start(nil, 0) {
		wt.cancel()
	}
}

func (w *Waiter) check(ctx context.Context, eventID string, wt *wait) error {
	e, err := w.kv.Get(ctx, eventID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if wt.start(nil, 0) {
			w.finish(eventID, wt)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("orchestrator: read record %s: %w", eventID, err)
	}
	rec, err := w.decoded.decode(eventID, e.Value(), e.Revision())
	if err != nil {
		return fmt.Errorf("orchestrator: record %s is unreadable: %w", eventID, err)
	}
	if wt.start(rec, e.Revision()) {
		w.finish(eventID, wt)
	}
	return nil
}

// Pending is the number of registered waits.
func (w *Waiter) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.waits {
		n += len(l)
	}
	return n
}

// recheck reads the record of every pending wait again. Call it after the
// NATS connection reconnected: the watch resumes where it stopped, and this
// closes any gap while the connection was down.
func (w *Waiter) recheck(ctx context.Context) {
	w.mu.Lock()
	keys := make([]string, 0, len(w.waits))
	for k := range w.waits {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		e, err := w.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		if rec, err := w.decoded.decode(k, e.Value(), e.Revision()); err == nil {
			w.deliver(k, rec, e.Revision())
		}
	}
}
