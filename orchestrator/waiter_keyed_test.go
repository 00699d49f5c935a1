package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// A waiter follows only the records it waits on: decisions of other
// processes' approvals deliver nothing to its connection, and its own
// approval's decision reaches it. A bucket waiter, for comparison, is
// sent every change.
func TestWaiterReceivesOnlyWhatConcernsItsWaits(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := e.srv.JetStreamAs(embedded.RoleOrchestrator)
	keyed, err := orchestrator.NewWaiter(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	bucketJS := e.srv.JetStreamAs(embedded.RoleOrchestrator)
	bucket, err := orchestrator.NewBucketWaiter(ctx, bucketJS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()

	mine := e.propose(ctx, t, "keyed-mine")
	decided := make(chan *contracts.Record, 2)
	for _, w := range []*orchestrator.Waiter{keyed, bucket} {
		if _, err := w.Watch(ctx, mine, decidedInto(decided)); err != nil {
			t.Fatal(err)
		}
	}
	const others = 20
	ids := make([]string, others)
	for i := range ids {
		ids[i] = e.propose(ctx, t, fmt.Sprintf("keyed-other-%d", i))
	}
	// The bucket waiter is told of each decision by its watch of the whole
	// bucket.
	seen := make(chan struct{}, others)
	for _, id := range ids {
		if _, err := bucket.Watch(ctx, id, func(rec *contracts.Record, _ uint64) bool {
			if rec.Terminal() {
				seen <- struct{}{}
				return true
			}
			return false
		}); err != nil {
			t.Fatal(err)
		}
	}
	keyedBefore, bucketBefore := js.Conn().Stats().InMsgs, bucketJS.Conn().Stats().InMsgs
	for _, id := range ids {
		e.vote(t, id, "alice", contracts.DecisionApprove, "")
	}
	for range others {
		select {
		case <-seen:
		case <-ctx.Done():
			t.Fatal("the bucket waiter never saw every decision")
		}
	}
	if got := bucketJS.Conn().Stats().InMsgs - bucketBefore; got < others {
		t.Fatalf("the bucket waiter's connection received %d messages, want at least %d (one per decision)", got, others)
	}
	if got := js.Conn().Stats().InMsgs - keyedBefore; got != 0 {
		t.Fatalf("the keyed waiter's connection received %d messages about %d other approvals, want 0", got, others)
	}
	e.vote(t, mine, "alice", contracts.DecisionApprove, "")
	for range 2 {
		select {
		case rec := <-decided:
			if rec.Status != contracts.StatusApproved {
				t.Fatalf("status %s", rec.Status)
			}
		case <-ctx.Done():
			t.Fatal("a waiter never saw its own approval decided")
		}
	}
}

// A wait for the decision alone (WatchDecided) on a bucket that does not
// republish its writes follows only the decided announcement:
// announcements that leave the record pending reach neither its
// connection nor a read of the record.
func TestWaiterDecidedOnlyFollowsTheDecision(t *testing.T) {
	e := setup(t)
	withoutRecordCopies(t, e.js)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := e.srv.JetStreamAs(embedded.RoleOrchestrator)
	w, err := orchestrator.NewWaiter(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id, decided := e.proposeAndWaitDecided(ctx, t, w, "decided-only")
	before := js.Conn().Stats().InMsgs
	other := e.srv.Connect()
	for _, subject := range []string{contracts.CreatedSubject(id), contracts.ChangedSubject(id)} {
		if err := other.Publish(subject, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	select {
	case rec := <-decided:
		if rec.Status != contracts.StatusApproved {
			t.Fatalf("status %s", rec.Status)
		}
	case <-ctx.Done():
		t.Fatal("the decision never reached the wait")
	}
	if got := js.Conn().Stats().InMsgs - before; got != 2 {
		t.Fatalf("the waiter's connection received %d messages, want 2: the decided announcement and the read of the record", got)
	}
}

// A revision is decoded once: a wait that starts after another was handed
// the decided record is handed the same record, not a second decoding.
func TestWaiterDecodesEachRevisionOnce(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := e.keyedWaiter(ctx, t, nil)
	id := e.propose(ctx, t, "decode-once")
	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	e.waitRecord(t, id, func(rec *contracts.Record) bool { return rec.Terminal() })
	got := make([]*contracts.Record, 0, 2)
	for range 2 {
		if _, err := w.WatchDecided(ctx, id, func(rec *contracts.Record, _ uint64) bool {
			got = append(got, rec)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("the two waits were handed %d records, want the same one twice: %p", len(got), got)
	}
}

// A read of an announced record that fails is tried again while the record
// is waited on: the decision is announced once, and its waits resume when
// the bucket can be read again instead of waiting for their deadlines.
func TestWaiterReadsAnAnnouncedRecordAgainAfterAFailedRead(t *testing.T) {
	e := setup(t)
	withoutRecordCopies(t, e.js)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failed := make(chan struct{}, 16)
	log := slog.New(&signalHandler{msg: "reading an announced approval record failed; reading it again", c: failed})
	w := e.keyedWaiter(ctx, t, log)
	var failing atomic.Bool
	w.FailReadsForTest(&failing)
	id, decided := e.proposeAndWaitDecided(ctx, t, w, "reread-retry")

	// The bucket stops answering the waiter's reads while the decision is
	// announced.
	failing.Store(true)
	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	for range 2 {
		select {
		case <-failed:
		case rec := <-decided:
			t.Fatalf("the wait resumed with %s while the bucket could not be read", rec.Status)
		case <-ctx.Done():
			t.Fatal("the waiter never tried to read the announced record (twice)")
		}
	}
	failing.Store(false)
	select {
	case rec := <-decided:
		if rec.Status != contracts.StatusApproved {
			t.Fatalf("status %s, want approved", rec.Status)
		}
	case <-ctx.Done():
		t.Fatal("the wait never resumed once the bucket could be read again")
	}
}

// proposeAndWaitDecided submits a gated call of run runID, waits until
// its record is pending, and has w wait for its decision alone: the
// channel receives the decided record.
func (e *env) proposeAndWaitDecided(ctx context.Context, t *testing.T, w *orchestrator.Waiter, runID string) (string, chan *contracts.Record) {
	t.Helper()
	id := e.propose(ctx, t, runID)
	decided := make(chan *contracts.Record, 1)
	if _, err := w.WatchDecided(ctx, id, decidedInto(decided)); err != nil {
		t.Fatal(err)
	}
	return id, decided
}

// propose submits a gated payment of run runID and returns its event id
// once its record is pending.
func (e *env) propose(ctx context.Context, t *testing.T, runID string) string {
	t.Helper()
	r := contracts.Run{ID: runID, Agent: "billing-bot", RequestedBy: "agent:billing"}
	call := orchestrator.ToolCall{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}
	if _, err := e.gate.Submit(ctx, r, []orchestrator.ToolCall{call}); err != nil {
		t.Fatal(err)
	}
	id := orchestrator.EventID(r, call.ID)
	e.waitRecord(t, id, pending)
	return id
}

// keyedWaiter is a waiter made by NewWaiter on the orchestrator's NATS
// user, closed when the test ends.
func (e *env) keyedWaiter(ctx context.Context, t *testing.T, log *slog.Logger) *orchestrator.Waiter {
	t.Helper()
	w, err := orchestrator.NewWaiter(ctx, e.srv.JetStreamAs(embedded.RoleOrchestrator), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// decidedInto is a wait that sends the record to ch once it is decided.
func decidedInto(ch chan<- *contracts.Record) orchestrator.WaitFunc {
	return func(rec *contracts.Record, _ uint64) bool {
		if rec.Terminal() {
			ch <- rec
			return true
		}
		return false
	}
}

// signalHandler is a slog handler that sends on c for each record whose
// message is msg.
type signalHandler struct {
	msg string
	c   chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.c <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

// A wait holds a subscription to its record's announcements but no
// goroutine (DESIGN §9: 100,000 waits in one process): registering
// hundreds of waits leaves the goroutine count where it was, and
// decisions of more records than the waiter has readers at once all
// reach their waits.
func TestWaitsHoldNoGoroutineEach(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := e.keyedWaiter(ctx, t, nil)
	never := func(*contracts.Record, uint64) bool { return false }
	const waits = 300
	before := runtime.NumGoroutine()
	for i := range waits {
		if _, err := w.WatchDecided(ctx, fmt.Sprintf("no-record-%d", i), never); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.Pending(); n != waits {
		t.Fatalf("%d waits pending, want %d", n, waits)
	}
	// The server's own goroutines come and go; a goroutine per wait would
	// add 300.
	if added := runtime.NumGoroutine() - before; added > 20 {
		t.Fatalf("%d waits added %d goroutines", waits, added)
	}

	const decided = 40
	done := make(chan *contracts.Record, decided)
	ids := make([]string, decided)
	for i := range ids {
		ids[i] = e.propose(ctx, t, fmt.Sprintf("no-goroutine-%d", i))
		if _, err := w.WatchDecided(ctx, ids[i], decidedInto(done)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		e.vote(t, id, "alice", contracts.DecisionApprove, "")
	}
	for i := range decided {
		select {
		case rec := <-done:
			if rec.Status != contracts.StatusApproved {
				t.Fatalf("wait %d woken with %s", i, rec.Status)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d decided waits woken", i, decided)
		}
	}
}

// When announcements arrived faster than the waiter took them (its
// channel was full, so the connection may have dropped some), every wait
// reads its record again: a decision whose announcement was lost still
// reaches its wait.
func TestWaiterRereadsEveryWaitAfterAnOverflow(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := e.keyedWaiter(ctx, t, nil)
	id, decided := e.proposeAndWaitDecided(ctx, t, w, "overflow")
	w.MissAnnouncementsForTest(id)
	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	e.waitRecord(t, id, func(rec *contracts.Record) bool { return rec.Terminal() })
	select {
	case rec := <-decided:
		t.Fatalf("the wait resumed (%s) without an announcement", rec.Status)
	default:
	}
	w.OverflowForTest()
	select {
	case rec := <-decided:
		if rec.Status != contracts.StatusApproved {
			t.Fatalf("resumed with %s", rec.Status)
		}
	case <-ctx.Done():
		t.Fatal("the wait was not woken by the re-read after the overflow")
	}
}

// decideAsArbiter writes id's record approved, as the arbiter would, but
// announces nothing: only the bucket's copy of the write can tell a waiter.
func (e *env) decideAsArbiter(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	kv, err := e.srv.JetStreamAs(embedded.RoleArbiter).KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var rec contracts.Record
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Status = contracts.StatusApproved
	rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionApprove, Arguments: rec.Request.ToolCall.Arguments,
		ArgumentsSHA256: rec.Request.ToolCall.ArgumentsSHA256, DecidedBy: []string{"alice"}, DecidedAt: time.Now().UTC()}
	data, err := contracts.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewRecordWriter(e.srv.JetStreamAs(embedded.RoleArbiter)).Update(ctx, id, data, nil, entry.Revision()); err != nil {
		t.Fatal(err)
	}
}

// Where the bucket republishes its writes (as provisioned), a keyed waiter
// is woken by the record write itself: a wait for the record and a
// review both resume on a decision that nobody announced, without a read
// of the record, the review from the decision's few fields.
func TestWaiterIsWokenByTheRecordWrite(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := e.keyedWaiter(ctx, t, nil)
	id, decided := e.proposeAndWaitDecided(ctx, t, w, "copy-watch")
	e.decideAsArbiter(ctx, t, id)
	select {
	case rec := <-decided:
		if rec.Status != contracts.StatusApproved || rec.Request.EventID != id {
			t.Fatalf("the wait got %s of %s", rec.Status, rec.Request.EventID)
		}
	case <-ctx.Done():
		t.Fatal("the record write never woke the wait")
	}

	r := contracts.Run{ID: "copy-review", Agent: "billing-bot", RequestedBy: "agent:billing"}
	call := orchestrator.ToolCall{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}
	review := make(chan []orchestrator.Verdict, 1)
	if err := e.gate.ReviewAsync(ctx, r, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
		if err != nil {
			t.Error(err)
		}
		review <- v
	}); err != nil {
		t.Fatal(err)
	}
	rid := orchestrator.EventID(r, call.ID)
	e.waitRecord(t, rid, pending)
	answered, reads := e.gate.Waiter().AnnouncementsForTest()
	e.decideAsArbiter(ctx, t, rid)
	select {
	case v := <-review:
		if v[0].Verdict != orchestrator.VerdictAllowed {
			t.Fatalf("verdict %+v, want allowed", v[0])
		}
	case <-ctx.Done():
		t.Fatal("the record write never resumed the review")
	}
	if a, rd := e.gate.Waiter().AnnouncementsForTest(); a-answered != 1 || rd != reads {
		t.Fatalf("%d waits answered from the decision and %d records read, want 1 and 0", a-answered, rd-reads)
	}
}

// A message on a record's copy subject that is not the server's copy of a
// write wakes nothing: no role may publish there, and a push consumer's
// delivery keeps the subject it was stored under, so a copy forged through
// one (an agent's credential may create consumers on the history stream,
// whose content it writes) is not taken for a record.
func TestForgedRecordCopyWakesNothing(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := e.keyedWaiter(ctx, t, nil)
	id, decided := e.proposeAndWaitDecided(ctx, t, w, "copy-forged")
	pendingRec, err := e.kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var rec contracts.Record
	if err := json.Unmarshal(pendingRec.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Status = contracts.StatusApproved
	rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionApprove, DecidedBy: []string{"mallory"}, DecidedAt: time.Now().UTC()}
	forged, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	// Stored on the history stream by an agent and pushed onto the copy
	// subject by a consumer the agent creates (publishing there itself is
	// refused: TestOnlyTheServerPublishesRecordCopies).
	agent := e.srv.ConnectAs(embedded.RoleOrchestrator)
	hdr := nats.Header{}
	hdr.Set(jetstream.SequenceHeader, "999999")
	listener := e.srv.Connect()
	spy, err := listener.SubscribeSync(contracts.RecordCopySubject(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := listener.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := agent.PublishMsg(&nats.Msg{Subject: contracts.SubjectHistoryPrefix + "forged", Header: hdr, Data: forged}); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(map[string]any{"stream_name": contracts.StreamHistory, "config": map[string]any{
		"name": "forger", "deliver_subject": contracts.RecordCopySubject(id), "filter_subject": contracts.SubjectHistoryPrefix + "forged",
		"ack_policy": "none", "deliver_policy": "all",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Request("$JS.API.CONSUMER.CREATE."+contracts.StreamHistory+".forger", cfg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The push delivery reaches a listener on the copy subject ...
	if m, err := spy.NextMsg(10 * time.Second); err != nil || !strings.HasPrefix(m.Subject, contracts.SubjectHistoryPrefix) {
		t.Fatalf("the forged copy was not delivered as the attacker intends (%v)", err)
	}
	// ... and the wait stays pending until the real decision, a rejection.
	e.vote(t, id, "alice", contracts.DecisionReject, "no")
	select {
	case got := <-decided:
		if got.Status != contracts.StatusRejected {
			t.Fatalf("the wait resumed with %s from a forged copy", got.Status)
		}
	case <-ctx.Done():
		t.Fatal("the wait never resumed")
	}
}

// A NATS user configured before the record copies existed, whose grant has
// no subscription to them, still has its waits resumed: the waiter finds
// it may not follow the copies and follows the announcements instead.
func TestWaiterWithoutTheCopiesGrantFollowsTheAnnouncements(t *testing.T) {
	perms := embedded.Permissions(embedded.RoleOrchestrator)
	perms.Subscribe.Allow = slices.DeleteFunc(perms.Subscribe.Allow, func(s string) bool {
		return s == contracts.SubjectRecordPrefix+">"
	})
	srv := eventstest.NewServer(t, eventstest.AllowViolations(), eventstest.ServerOptions(func(o *server.Options) {
		o.Users = append(o.Users, &server.User{Username: "earlier-agent", Password: "earlier-agent-password", Permissions: perms})
	}))
	js := srv.JetStream()
	srv.Provision(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter)})
	nc, err := nats.Connect(srv.URL(), nats.UserInfo("earlier-agent", "earlier-agent-password"),
		embedded.InboxOption(embedded.RoleOrchestrator), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ajs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	gate := countersigntest.Gate(t, ajs, orchestrator.StaticPolicy{P: countersigntest.Policy(t, testPolicy)})
	kv, err := js.KeyValue(context.Background(), contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, js: js, kv: kv, gate: gate}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := contracts.Run{ID: "earlier-grant", Agent: "billing-bot", RequestedBy: "agent:billing"}
	call := orchestrator.ToolCall{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}
	review := make(chan []orchestrator.Verdict, 1)
	if err := gate.ReviewAsync(ctx, r, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
		if err != nil {
			t.Error(err)
		}
		review <- v
	}); err != nil {
		t.Fatal(err)
	}
	id := orchestrator.EventID(r, call.ID)
	e.waitRecord(t, id, pending)
	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	select {
	case v := <-review:
		if v[0].Verdict != orchestrator.VerdictAllowed {
			t.Fatalf("verdict %+v, want allowed", v[0])
		}
	case <-ctx.Done():
		t.Fatal("the decision never resumed the review of a user without the copies grant")
	}
}
