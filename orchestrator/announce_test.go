package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

const announcePolicy = `
version: "announce-1"
default: require_approval
rules:
  - name: refunds
    tools: ["stripe.refund"]
    action: require_approval
    approvers: [alice]
    allowed_decisions: [approve, reject, edit, respond]
    timeout: 1h
  - name: questions
    tools: [request_human_input]
    action: require_approval
    approvers: [alice]
`

// annEnv is a server whose components each connect as their role's NATS
// user: an arbiter (unless the test plays it), a gate, a resolver.
type annEnv struct {
	srv      *eventstest.Server
	clock    *countersigntest.Clock
	orch     jetstream.JetStream
	resolver jetstream.JetStream
	kv       jetstream.KeyValue // the approvals, read as the orchestrator
	gate     *orchestrator.Gate
}

func newAnnEnv(t *testing.T, withArbiter bool, opts ...eventstest.Option) *annEnv {
	t.Helper()
	srv := eventstest.NewServer(t, opts...)
	admin := srv.JetStream()
	srv.Provision(admin)
	// These tests are of the announcements, which wake the waits where the
	// bucket does not republish its writes.
	withoutRecordCopies(t, admin)
	e := &annEnv{srv: srv, clock: countersigntest.NewClock(time.Now())}
	e.clock.Attach(admin)
	if withArbiter {
		countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Now: e.clock.Now})
	}
	e.orch, e.resolver = srv.JetStreamAs(embedded.RoleOrchestrator), srv.JetStreamAs(embedded.RoleResolver)
	e.gate = e.newGate(t, e.orch)
	kv, err := e.orch.KeyValue(context.Background(), contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	e.kv = kv
	return e
}

// withoutRecordCopies turns off the approvals bucket's republishing of its
// writes, as in a bucket an earlier release provisioned: keyed waiters
// made afterwards follow the announcements.
func withoutRecordCopies(t *testing.T, admin jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := admin.Stream(ctx, "KV_"+contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.RePublish = nil
	if _, err := admin.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
}

func (e *annEnv) newGate(t *testing.T, js jetstream.JetStream) *orchestrator.Gate {
	t.Helper()
	p := countersigntest.Policy(t, announcePolicy)
	countersigntest.Trust(t, p)
	g, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: js, Policy: orchestrator.StaticPolicy{P: p}, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// review starts a review of call on g; it has registered its wait when
// review returns.
func review(t *testing.T, g *orchestrator.Gate, call orchestrator.ToolCall) <-chan reviewResult {
	t.Helper()
	ch := make(chan reviewResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := g.ReviewAsync(ctx, run, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
		ch <- reviewResult{v, err}
	}); err != nil {
		t.Fatal(err)
	}
	return ch
}

func (e *annEnv) vote(t *testing.T, eventID string, v contracts.Vote) {
	t.Helper()
	v.Spec, v.VoteID, v.EventID = contracts.SpecVote, uuid.NewString(), eventID
	v.Approver = contracts.Approver{ID: "alice", Via: contracts.ViaNATS}
	v.DecidedAt = time.Now().UTC()
	if _, err := events.Publish(context.Background(), e.resolver, contracts.ResolvedSubject(eventID), v, v.VoteID, nil); err != nil {
		t.Fatal(err)
	}
}

// record waits until eventID's record satisfies cond and returns it.
func (e *annEnv) record(t *testing.T, eventID string, cond func(*contracts.Record) bool) *contracts.Record {
	t.Helper()
	return watchRecord(t, e.kv, eventID, 20*time.Second, cond)
}

func terminal(r *contracts.Record) bool { return r.Terminal() }

// sameVerdict fails unless got is the verdict the gate gives from rec, the
// record read (the path before decided announcements answered waits).
func sameVerdict(t *testing.T, name string, got orchestrator.Verdict, rec *contracts.Record, callID, sha string) {
	t.Helper()
	want := orchestrator.VerdictFor(rec, callID, sha)
	if got.ToolCallID != want.ToolCallID || got.Verdict != want.Verdict || got.EventID != want.EventID ||
		got.Reason != want.Reason || got.Code != want.Code || got.Rule != want.Rule || got.Edited != want.Edited ||
		!bytes.Equal(got.Arguments, want.Arguments) || !bytes.Equal(got.Diff, want.Diff) {
		t.Fatalf("%s: verdict from the announcement\n  %+v\nfrom the record\n  %+v", name, got, want)
	}
	if want.Verdict != orchestrator.VerdictAllowed {
		if got.Permit != nil {
			t.Fatalf("%s: a %s verdict carries a permit", name, got.Verdict)
		}
		return
	}
	if got.Permit == nil {
		t.Fatalf("%s: an allowed verdict without a permit", name)
	}
	by := rec.Request.Submitter
	if by == "" {
		by = rec.Request.Run.Agent
	}
	ev, psha, args, pby := orchestrator.PermitForTest(got.Permit)
	if ev != rec.Request.EventID || psha != rec.Outcome.ArgumentsSHA256 || !bytes.Equal(args, want.Arguments) || pby != by {
		t.Fatalf("%s: permit for %s %s %s by %s, the record's is %s %s %s by %s", name, ev, psha, args, pby,
			rec.Request.EventID, rec.Outcome.ArgumentsSHA256, want.Arguments, by)
	}
}

// A decided announcement answers a review or a question without a read of
// the record, and with the verdict the record read gives, for every way a
// record ends: approved, edited, rejected, responded, cancelled, expired,
// and a human's answer. One gate knows each request as the one it
// published, another as the pending record it re-attached to.
func TestDecidedAnnouncementAnswersAsTheRecordWould(t *testing.T) {
	e := newAnnEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := e.newGate(t, e.srv.JetStreamAs(embedded.RoleOrchestrator))
	gates := []*orchestrator.Gate{e.gate, other}

	// A question, answered (before the clock moves on for the expiry).
	q := orchestrator.Question{ID: "which-city", Text: "Which city?"}
	id := orchestrator.EventID(run, q.ID)
	// Every wait is made on a record already pending: a wait made before
	// the record exists reads it again when it is created, and that read,
	// if it comes after the decision, answers the wait first.
	a, _, stop0, err := e.gate.AskAsyncForTest(ctx, run, q)
	if err != nil || a.Status != orchestrator.VerdictPending {
		t.Fatalf("ask: %+v, %v", a, err)
	}
	e.record(t, id, pending)
	stop0()
	answered, reads := counts(gates)
	a, ch, stop, err := e.gate.AskAsyncForTest(ctx, run, q)
	if err != nil || a.Status != orchestrator.VerdictPending {
		t.Fatalf("ask again: %+v, %v", a, err)
	}
	defer stop()
	a, ch2, stop2, err := other.AskAsyncForTest(ctx, run, q)
	if err != nil || a.Status != orchestrator.VerdictPending {
		t.Fatalf("ask again: %+v, %v", a, err)
	}
	defer stop2()
	e.vote(t, id, contracts.Vote{Decision: contracts.DecisionAnswer, Answer: &contracts.Answer{Action: orchestrator.ActionAccept, Content: json.RawMessage(`{"text":"Lisbon"}`)}})
	rec := e.record(t, id, terminal)
	want := orchestrator.AnswerFor(rec)
	for _, c := range []<-chan orchestrator.Answer{ch, ch2} {
		got := <-c
		if got.Status != orchestrator.VerdictAnswered || got.EventID != want.EventID || got.Status != want.Status ||
			got.Action != want.Action || !bytes.Equal(got.Content, want.Content) || got.AnsweredBy != want.AnsweredBy ||
			got.Reason != want.Reason || got.Code != want.Code || got.Rule != want.Rule {
			t.Fatalf("answer from the announcement\n  %+v\nfrom the record\n  %+v", got, want)
		}
	}
	if a2, r2 := counts(gates); a2-answered != 2 || r2 != reads {
		t.Fatalf("question: %d waits answered by the announcement and %d records read, want 2 and 0", a2-answered, r2-reads)
	}

	// reads is how many records each case reads: an edit is answered by
	// the read, which alone shows that the edited call is this call's.
	cases := []struct {
		name   string
		decide func(t *testing.T, eventID string)
		status string
		reads  uint64
	}{
		{"approved", func(t *testing.T, id string) {
			e.vote(t, id, contracts.Vote{Decision: contracts.DecisionApprove})
		}, contracts.StatusApproved, 0},
		{"edited", func(t *testing.T, id string) {
			e.vote(t, id, contracts.Vote{Decision: contracts.DecisionEdit, Arguments: json.RawMessage(`{"amount":5,"currency":"eur"}`)})
		}, contracts.StatusApproved, 2},
		{"rejected", func(t *testing.T, id string) {
			e.vote(t, id, contracts.Vote{Decision: contracts.DecisionReject, Comment: "Too much."})
		}, contracts.StatusRejected, 0},
		{"responded", func(t *testing.T, id string) {
			e.vote(t, id, contracts.Vote{Decision: contracts.DecisionRespond, Comment: "Ask the customer first."})
		}, contracts.StatusResponded, 0},
		{"cancelled", func(t *testing.T, id string) {
			cmd := contracts.Command{Spec: contracts.SpecCommand, CommandID: uuid.NewString(), EventID: id, Command: contracts.CommandCancel, By: "alice"}
			if _, err := events.Publish(ctx, e.orch, contracts.CommandSubject(id), cmd, cmd.CommandID, nil); err != nil {
				t.Fatal(err)
			}
		}, contracts.StatusCancelled, 0},
		// Last: the clock moves an hour on.
		{"expired", func(t *testing.T, id string) {
			if err := e.clock.WaitScheduled(ctx, id, contracts.TimerExpire, e.clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := e.clock.Advance(ctx, time.Hour); err != nil {
				t.Fatal(err)
			}
		}, contracts.StatusExpired, 0},
	}
	for _, c := range cases {
		call := orchestrator.ToolCall{ID: "refund-" + c.name, Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":10,"currency":"eur"}`)}
		id := orchestrator.EventID(run, call.ID)
		_, sha, err := canonicalSHA(call.Arguments)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{call}); err != nil {
			t.Fatal(err)
		}
		e.record(t, id, pending)
		answered, reads := counts(gates)
		first := review(t, e.gate, call) // both re-attach to the pending record
		second := review(t, other, call)
		c.decide(t, id)
		rec := e.record(t, id, terminal)
		if rec.Status != c.status {
			t.Fatalf("%s: record %s", c.name, rec.Status)
		}
		// Both verdicts first: a claim changes the record a waiter that
		// reads it (an edit) would see.
		results := []reviewResult{<-first, <-second}
		for _, r := range results {
			if r.err != nil {
				t.Fatalf("%s: %v", c.name, r.err)
			}
			sameVerdict(t, c.name, r.v[0], rec, call.ID, sha)
		}
		if v := results[0].v[0]; v.Verdict == orchestrator.VerdictAllowed {
			if err := v.Permit.Claim(ctx); err != nil {
				t.Fatalf("%s: claim of the permit from the announcement: %v", c.name, err)
			}
		}
		a2, r2 := counts(gates)
		if a2-answered != 2-c.reads || r2-reads != c.reads {
			t.Fatalf("%s: %d waits answered by the announcement and %d records read, want %d and %d", c.name, a2-answered, r2-reads, 2-c.reads, c.reads)
		}
	}
}

func counts(gates []*orchestrator.Gate) (answered, reads uint64) {
	for _, g := range gates {
		a, r := g.Waiter().AnnouncementsForTest()
		answered, reads = answered+a, reads+r
	}
	return answered, reads
}

func canonicalSHA(raw json.RawMessage) (json.RawMessage, string, error) {
	canon, err := contracts.Canonicalize(raw)
	if err != nil {
		return nil, "", err
	}
	return canon, contracts.CanonicalSHA256(canon), nil
}

// Only the arbiter's NATS user may publish on hitl.approval.decided.>: a
// decided announcement forged by any other role is refused by the server
// and resumes nothing. The wait resumes with the arbiter's decision.
func TestForgedDecidedAnnouncementResumesNothing(t *testing.T) {
	e := newAnnEnv(t, true, eventstest.AllowViolations())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := orchestrator.ToolCall{ID: "refund-forged", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":10,"currency":"eur"}`)}
	id := orchestrator.EventID(run, call.ID)
	canon, sha, err := canonicalSHA(call.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	ch := review(t, e.gate, call)
	e.record(t, id, pending)
	forged, err := json.Marshal(contracts.Decided{
		Spec: contracts.SpecDecided, EventID: id, Status: contracts.StatusApproved, Agent: run.Agent, RunID: run.ID,
		Outcome: &contracts.Outcome{Decision: contracts.DecisionApprove, Arguments: canon, ArgumentsSHA256: sha,
			DecidedBy: []string{"alice"}, DecidedAt: time.Now().UTC()},
		Revision: 1 << 40, DecidedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []embedded.Role{embedded.RoleOrchestrator, embedded.RoleResolver, embedded.RoleAPI, embedded.RoleNotifier} {
		refused := make(chan error, 1)
		nc := e.srv.ConnectAs(role, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case refused <- err:
				default:
				}
			}
		}))
		if err := nc.Publish(contracts.DecidedSubject(id), forged); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-refused:
		case <-ctx.Done():
			t.Fatalf("the server did not refuse %s's decided announcement", role)
		}
	}
	// Had any forged announcement reached the waiter, it would have come
	// before the arbiter's, which rejects.
	e.vote(t, id, contracts.Vote{Decision: contracts.DecisionReject, Comment: "No."})
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.v[0].Verdict != orchestrator.VerdictDenied {
		t.Fatalf("verdict %+v, want denied: a forged announcement resumed the review", r.v[0])
	}
	sameVerdict(t, "rejected", r.v[0], e.record(t, id, terminal), call.ID, sha)
}

// A decided announcement that is malformed or does not match the wait (an
// unreadable body, another spec, another event id, a status that is not a
// decision, no outcome, a revision not newer than the one the wait
// began with) answers nothing: the waiter reads the record, and the
// review resumes with the record's verdict. The test plays the arbiter,
// with the arbiter's NATS user: the record says rejected, each
// announcement claims an approval.
func TestMalformedDecidedAnnouncementFallsBackToTheRecord(t *testing.T) {
	e := newAnnEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	arbJS := e.srv.JetStreamAs(embedded.RoleArbiter)
	arbKV, err := arbJS.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	admin := e.srv.JetStream() // inspection: the request the gate published
	requests, err := admin.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		forge   func(d *contracts.Decided, pendingRev uint64)
		garbage string
	}{
		{name: "unreadable", garbage: `{"spec":`},
		{name: "duplicate keys", garbage: `{"spec":"countersign.approval.decided/v1","status":"rejected","status":"approved"}`},
		{name: "other spec", forge: func(d *contracts.Decided, _ uint64) { d.Spec = contracts.SpecChanged }},
		{name: "other event id", forge: func(d *contracts.Decided, _ uint64) { d.EventID = uuid.NewString() }},
		{name: "unknown status", forge: func(d *contracts.Decided, _ uint64) { d.Status = "approved-ish" }},
		{name: "pending", forge: func(d *contracts.Decided, _ uint64) { d.Status = contracts.StatusPending }},
		{name: "no outcome", forge: func(d *contracts.Decided, _ uint64) { d.Outcome = nil }},
		{name: "revision not newer", forge: func(d *contracts.Decided, rev uint64) { d.Revision = rev }},
		{name: "no revision", forge: func(d *contracts.Decided, _ uint64) { d.Revision = 0 }},
	}
	for _, c := range cases {
		call := orchestrator.ToolCall{ID: "refund-" + c.name, Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":10,"currency":"eur"}`)}
		id := orchestrator.EventID(run, call.ID)
		canon, sha, err := canonicalSHA(call.Arguments)
		if err != nil {
			t.Fatal(err)
		}
		// The gate publishes its request; the arbiter (the test) makes it
		// a pending record; the review re-attaches and begins with it.
		if _, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{call}); err != nil {
			t.Fatal(err)
		}
		msg, err := requests.GetLastMsgForSubject(ctx, contracts.ToolRequestedSubject(run.Agent))
		if err != nil {
			t.Fatal(err)
		}
		var req contracts.ApprovalRequested
		if err := json.Unmarshal(msg.Data, &req); err != nil || req.EventID != id {
			t.Fatalf("%s: request %s, %v", c.name, req.EventID, err)
		}
		rec := approval.NewRecord(req, time.Now().UTC())
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		pendingRev, err := arbKV.Create(ctx, id, data)
		if err != nil {
			t.Fatal(err)
		}
		ch := review(t, e.gate, call)
		answered, reads := e.gate.Waiter().AnnouncementsForTest()
		now := time.Now().UTC()
		rec.Status = contracts.StatusRejected
		rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionReject, Comment: "No.", DecidedBy: []string{"alice"}, DecidedAt: now}
		if data, err = json.Marshal(rec); err != nil {
			t.Fatal(err)
		}
		rev, err := events.NewRecordWriter(arbJS).Update(ctx, id, data, nil, pendingRev)
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(c.garbage)
		if c.forge != nil {
			d := contracts.Decided{
				Spec: contracts.SpecDecided, EventID: id, Status: contracts.StatusApproved, Agent: run.Agent, RunID: run.ID,
				Outcome: &contracts.Outcome{Decision: contracts.DecisionApprove, Arguments: canon, ArgumentsSHA256: sha,
					DecidedBy: []string{"alice"}, DecidedAt: now},
				Revision: rev, DecidedAt: now,
			}
			c.forge(&d, pendingRev)
			if body, err = json.Marshal(d); err != nil {
				t.Fatal(err)
			}
		}
		if err := arbJS.Conn().Publish(contracts.DecidedSubject(id), body); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s: %v", c.name, r.err)
		}
		stored := e.record(t, id, terminal)
		if r.v[0].Verdict != orchestrator.VerdictDenied {
			t.Fatalf("%s: verdict %+v, want the record's (rejected)", c.name, r.v[0])
		}
		sameVerdict(t, c.name, r.v[0], stored, call.ID, sha)
		if a2, r2 := e.gate.Waiter().AnnouncementsForTest(); a2 != answered || r2 != reads+1 {
			t.Fatalf("%s: %d waits answered by the announcement and %d records read, want 0 and 1", c.name, a2-answered, r2-reads)
		}
	}
}
