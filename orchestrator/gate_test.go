package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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

const testPolicy = `
version: "t1"
default: require_approval
rules:
  - name: reads
    tools: ["search_*", "read_*"]
    action: allow
  - name: no-shell
    tools: ["shell.*"]
    action: deny
    reason: "Shell is off limits."
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
    summary: "Pay {{args.amount}} EUR to {{args.recipient}}"
`

type env struct {
	srv  *eventstest.Server
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	gate *orchestrator.Gate
	// now is the clock of the env's arbiter and gates (nil: the wall clock).
	now func() time.Time
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), UnknownEventDelay: 20 * time.Millisecond, UnknownEventAttempts: 3})
	gate := countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleOrchestrator), orchestrator.StaticPolicy{P: countersigntest.Policy(t, testPolicy)})
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, js: js, kv: kv, gate: gate}
}

func (e *env) vote(t *testing.T, eventID, approver, decision, comment string) string {
	t.Helper()
	id := uuid.NewString()
	v := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: id, EventID: eventID, Decision: decision,
		Approver: contracts.Approver{ID: approver, Via: contracts.ViaNATS}, Comment: comment, DecidedAt: time.Now().UTC(),
	}
	if _, err := events.Publish(context.Background(), e.js, contracts.ResolvedSubject(eventID), v, id, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitRecord blocks until the record satisfies cond, using a KV watch.
func (e *env) waitRecord(t *testing.T, eventID string, cond func(*contracts.Record) bool) *contracts.Record {
	t.Helper()
	return watchRecord(t, e.kv, eventID, 10*time.Second, cond)
}

// watchRecord blocks until eventID's record in kv satisfies cond, within d.
func watchRecord(t *testing.T, kv jetstream.KeyValue, eventID string, d time.Duration, cond func(*contracts.Record) bool) *contracts.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w, err := kv.Watch(ctx, eventID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case entry := <-w.Updates():
			if entry == nil {
				continue
			}
			var rec contracts.Record
			if err := json.Unmarshal(entry.Value(), &rec); err != nil {
				t.Fatal(err)
			}
			if cond(&rec) {
				return &rec
			}
		case <-ctx.Done():
			t.Fatalf("record %s never reached the expected state", eventID)
		}
	}
}

func pending(r *contracts.Record) bool { return r.Status == contracts.StatusPending }

var run = contracts.Run{ID: "run-1", Agent: "billing-bot", RequestedBy: "agent:billing", Tenant: "acme"}

func TestPolicyAllowAndDenyNeverCreateRequests(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	verdicts, err := e.gate.Review(ctx, run, []orchestrator.ToolCall{
		{ID: "c1", Name: "search_web", Arguments: json.RawMessage(`{"q":"x"}`)},
		{ID: "c2", Name: "shell.exec", Arguments: json.RawMessage(`{"cmd":"rm -rf /"}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if verdicts[0].Verdict != orchestrator.VerdictAllowed || verdicts[0].EventID != "" {
		t.Fatalf("search_web: %+v", verdicts[0])
	}
	if err := verdicts[0].Permit.Claim(ctx); err != nil {
		t.Fatalf("claim of a policy-allowed call: %v", err)
	}
	if verdicts[1].Verdict != orchestrator.VerdictDenied || verdicts[1].Reason != "Shell is off limits." {
		t.Fatalf("shell.exec: %+v", verdicts[1])
	}
	info, err := e.js.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("requests published for ungated calls: %d", n)
	}
}

func TestApproveClaimOnce(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	call := orchestrator.ToolCall{ID: "pay-1", Name: "payments.send", Arguments: json.RawMessage(`{"recipient":"ACME GmbH","amount":250}`)}
	eventID := orchestrator.EventID(run, call.ID)
	type res struct {
		v   []orchestrator.Verdict
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := e.gate.Review(ctx, run, []orchestrator.ToolCall{call})
		ch <- res{v, err}
	}()
	rec := e.waitRecord(t, eventID, pending)
	if rec.Request.Summary != "Pay 250 EUR to ACME GmbH" || rec.Request.Risk != contracts.RiskHigh {
		t.Fatalf("request snapshot: summary %q risk %q", rec.Request.Summary, rec.Request.Risk)
	}
	e.vote(t, eventID, "alice", contracts.DecisionApprove, "")
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	v := r.v[0]
	if v.Verdict != orchestrator.VerdictAllowed || v.EventID != eventID {
		t.Fatalf("verdict %+v", v)
	}
	want, _ := contracts.ArgumentsSHA256(call.Arguments)
	got, _ := contracts.ArgumentsSHA256(v.Arguments)
	if got != want {
		t.Fatalf("allowed arguments hash %s, want %s", got, want)
	}
	// A second worker re-attaches before the first claims: its permit is
	// another claimant.
	other, err := e.gate.Review(ctx, run, []orchestrator.ToolCall{call})
	if err != nil || other[0].Verdict != orchestrator.VerdictAllowed || other[0].Permit == nil {
		t.Fatalf("second review before the claim: %+v %v", other, err)
	}
	if v.Permit.ClaimID() == "" || v.Permit.ClaimID() == other[0].Permit.ClaimID() {
		t.Fatalf("claim ids %q and %q: want two distinct ones", v.Permit.ClaimID(), other[0].Permit.ClaimID())
	}
	if err := v.Permit.Claim(ctx); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := other[0].Permit.Claim(ctx); !errors.Is(err, orchestrator.ErrAlreadyExecuted) {
		t.Fatalf("claim by another permit: %v, want ErrAlreadyExecuted", err)
	}
	// The first permit's claim retried (say, after a timeout) is its own.
	if err := v.Permit.Claim(ctx); err != nil {
		t.Fatalf("claim retried by the permit that claimed: %v, want nil", err)
	}
	rec = e.waitRecord(t, eventID, func(r *contracts.Record) bool { return r.Claim != nil })
	if rec.Claim.ClaimID != v.Permit.ClaimID() {
		t.Fatalf("record's claim %q, want the permit's %q", rec.Claim.ClaimID, v.Permit.ClaimID())
	}
	again, err := e.gate.Review(ctx, run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Verdict != orchestrator.VerdictAlreadyExecuted || again[0].Permit != nil {
		t.Fatalf("re-run after claim: %+v", again[0])
	}
	// Say what is known: claimed, outcome unknown; never "executed".
	if r := again[0].Reason; !strings.Contains(r, "claimed") || !strings.Contains(r, rec.Claim.ClaimID) || !strings.Contains(r, "does not know whether the tool") {
		t.Fatalf("re-run reason %q", r)
	}
}

// Only an allowed verdict carries a permit, and no other permit lets a
// call run: a pending verdict has none, and a zero or nil Permit fails.
func TestOnlyAllowedVerdictsCarryPermits(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	call := orchestrator.ToolCall{ID: "pay-permit", Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)}
	v, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Verdict != orchestrator.VerdictPending || v[0].Permit != nil {
		t.Fatalf("pending verdict %+v carries a permit", v[0])
	}
	if err := v[0].Permit.Claim(ctx); !errors.Is(err, orchestrator.ErrNotApproved) {
		t.Fatalf("claim of a pending verdict: %v, want ErrNotApproved", err)
	}
	if err := (&orchestrator.Permit{}).Claim(ctx); !errors.Is(err, orchestrator.ErrNotApproved) {
		t.Fatalf("claim of a zero Permit: %v, want ErrNotApproved", err)
	}
	allowed, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{{ID: "search-permit", Name: "search_web", Arguments: json.RawMessage(`{"q":"x"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if allowed[0].Verdict != orchestrator.VerdictAllowed || allowed[0].Permit == nil {
		t.Fatalf("policy-allowed verdict %+v has no permit", allowed[0])
	}
	if err := allowed[0].Permit.Claim(ctx); err != nil {
		t.Fatalf("claim of a policy-allowed call: %v", err)
	}
}

func TestRejectReturnsReason(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	call := orchestrator.ToolCall{ID: "pay-2", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}
	eventID := orchestrator.EventID(run, call.ID)
	voted := make(chan struct{})
	go func() {
		// The vote's ack can arrive after the review returns: the test
		// waits for it before its connections close.
		defer close(voted)
		e.waitRecord(t, eventID, pending)
		e.vote(t, eventID, "bob", contracts.DecisionReject, "wrong vendor")
	}()
	v, err := e.gate.Review(ctx, run, []orchestrator.ToolCall{call})
	<-voted
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Verdict != orchestrator.VerdictDenied || v[0].Reason != "A human reviewer rejected this tool call. Reason: wrong vendor" {
		t.Fatalf("verdict %+v", v[0])
	}
	if v[0].Permit != nil {
		t.Fatal("a rejected call carries a permit")
	}
}

func TestReviewTwiceCreatesOneApprovalAndSeesEarlierDecision(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	call := orchestrator.ToolCall{ID: "c-dup", Name: "unknown.tool", Arguments: json.RawMessage(`{"a":1}`)}
	pendingV, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if pendingV[0].Verdict != orchestrator.VerdictPending || pendingV[0].Rule != "default" {
		t.Fatalf("unknown tool must be gated by the default: %+v", pendingV[0])
	}
	again, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].EventID != pendingV[0].EventID {
		t.Fatalf("event ids differ: %s vs %s", again[0].EventID, pendingV[0].EventID)
	}
	e.waitRecord(t, pendingV[0].EventID, pending)
	e.vote(t, pendingV[0].EventID, "carol", contracts.DecisionApprove, "")
	e.waitRecord(t, pendingV[0].EventID, func(r *contracts.Record) bool { return r.Status == contracts.StatusApproved })
	// Decided before this Review starts: returned at once.
	v, err := e.gate.Review(ctx, run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Verdict != orchestrator.VerdictAllowed {
		t.Fatalf("verdict %+v", v[0])
	}
	keys, err := e.kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
	// Same ids, other arguments: refused.
	changed := call
	changed.Arguments = json.RawMessage(`{"a":2}`)
	if _, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{changed}); !errors.Is(err, orchestrator.ErrArgumentsChanged) {
		t.Fatalf("changed arguments: %v", err)
	}
}

func TestConflictingVotesYieldOneOutcome(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	call := orchestrator.ToolCall{ID: "race", Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)}
	v, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	eventID := v[0].EventID
	e.waitRecord(t, eventID, pending)
	var wg sync.WaitGroup
	ids := make([]string, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			decision := contracts.DecisionApprove
			if i%2 == 1 {
				decision = contracts.DecisionReject
			}
			ids[i] = e.vote(t, eventID, fmt.Sprintf("approver-%d", i), decision, "")
		}()
	}
	wg.Wait()
	rec := e.waitRecord(t, eventID, func(r *contracts.Record) bool { return len(r.Votes)+len(r.RefusedVotes) == 50 })
	if len(rec.Votes) != 1 || !rec.Terminal() {
		t.Fatalf("%d counted votes, status %s; want exactly one outcome", len(rec.Votes), rec.Status)
	}
	for _, rv := range rec.RefusedVotes {
		if rv.Reason != contracts.ReasonClosed {
			t.Fatalf("refused vote reason %q, want closed", rv.Reason)
		}
	}
	// Exactly one decided event.
	s, err := e.js.Stream(ctx, contracts.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(contracts.DecidedSubject(eventID)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[contracts.DecidedSubject(eventID)]; n != 1 {
		t.Fatalf("%d decided events, want 1", n)
	}
}

func TestWaiterSurvivesServerRestart(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	call := orchestrator.ToolCall{ID: "restart", Name: "payments.send", Arguments: json.RawMessage(`{"amount":7}`)}
	eventID := orchestrator.EventID(run, call.ID)
	ch := make(chan []orchestrator.Verdict, 1)
	if err := e.gate.ReviewAsync(ctx, run, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
		if err != nil {
			t.Error(err)
		}
		ch <- v
	}); err != nil {
		t.Fatal(err)
	}
	e.waitRecord(t, eventID, pending)
	e.srv.Restart()
	e.vote(t, eventID, "dave", contracts.DecisionApprove, "")
	select {
	case v := <-ch:
		if v[0].Verdict != orchestrator.VerdictAllowed {
			t.Fatalf("verdict %+v", v[0])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting run was not woken after a server restart")
	}
}

func TestReviewExpiresWithMessageForModel(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	clock := countersigntest.NewClock(time.Now())
	clock.Attach(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Now: clock.Now})
	p := countersigntest.Policy(t, `
version: "t1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    timeout: 1h
`)
	countersigntest.Trust(t, p)
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: srv.JetStreamAs(embedded.RoleOrchestrator), Policy: orchestrator.StaticPolicy{P: p}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	call := orchestrator.ToolCall{ID: "pay-expire", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	type result struct {
		v   []orchestrator.Verdict
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := gate.Review(rctx, run, []orchestrator.ToolCall{call})
		done <- result{v, err}
	}()
	// The hour passes once the arbiter has scheduled the deadline.
	if err := clock.WaitScheduled(rctx, orchestrator.EventID(run, call.ID), contracts.TimerExpire, clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := clock.Advance(rctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	v := r.v
	if v[0].Verdict != orchestrator.VerdictExpired || v[0].Reason == "" || v[0].Permit != nil {
		t.Fatalf("verdict %+v, want expired with a reason and no permit", v[0])
	}
}

// The waiter follows reconnects of the caller's connection without
// replacing the caller's own reconnect handler, set before or after.
func TestWaiterKeepsTheCallersReconnectHandlers(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	before, after := make(chan struct{}, 1), make(chan struct{}, 1)
	nc := srv.ConnectAs(embedded.RoleOrchestrator, nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case before <- struct{}{}:
		default:
		}
	}))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := orchestrator.NewWaiter(context.Background(), js, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nc.SetReconnectHandler(func(*nats.Conn) {
		select {
		case before <- struct{}{}:
		default:
		}
		select {
		case after <- struct{}{}:
		default:
		}
	})
	srv.Restart()
	for _, ch := range []chan struct{}{before, after} {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatal("the caller's reconnect handler was not called after a server restart")
		}
	}
}

// A ReviewAsync callback that blocks holds up nothing else: here the first
// review's callback waits for the second's, which could never run if
// callbacks ran on the waiter's dispatch loop.
func TestReviewAsyncCallbackNeverStallsOtherWaits(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	first := orchestrator.ToolCall{ID: "slow-cb", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}
	second := orchestrator.ToolCall{ID: "fast-cb", Name: "payments.send", Arguments: json.RawMessage(`{"amount":2}`)}
	secondDone, firstDone := make(chan struct{}), make(chan struct{})
	if err := e.gate.ReviewAsync(ctx, run, []orchestrator.ToolCall{first}, func([]orchestrator.Verdict, error) {
		<-secondDone // blocks until the other review's callback has run
		close(firstDone)
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.gate.ReviewAsync(ctx, run, []orchestrator.ToolCall{second}, func([]orchestrator.Verdict, error) {
		close(secondDone)
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []orchestrator.ToolCall{first, second} {
		id := orchestrator.EventID(run, c.ID)
		e.waitRecord(t, id, pending)
		e.vote(t, id, "dave", contracts.DecisionApprove, "")
	}
	select {
	case <-firstDone:
	case <-time.After(20 * time.Second):
		t.Fatal("a blocked ReviewAsync callback stalled another review's callback")
	}
}
