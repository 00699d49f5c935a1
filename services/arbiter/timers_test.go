package arbiter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// timedRequest is a pending tool approval created at now that expires after d.
func timedRequest(t *testing.T, now time.Time, d time.Duration, opts ...func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
	t.Helper()
	now = now.UTC()
	return request(t, append([]func(*contracts.ApprovalRequested){func(r *contracts.ApprovalRequested) {
		r.EventID = "timer-" + uuid.NewString()
		r.CreatedAt = now
		r.ExpiresAt = now.Add(d)
	}}, opts...)...)
}

// clockBus is a bus whose timers run on a fake clock: the clock plays the
// server's scheduler, so an hour of a request's life takes no wall time.
// Its arbiters, started with startArbiter, read the clock.
type clockBus struct {
	*bus
	clock *countersigntest.Clock
}

func newClockBus(t *testing.T) *clockBus {
	t.Helper()
	b := newBus(t, events.ProvisionConfig{})
	clock := countersigntest.NewClock(time.Now())
	clock.Attach(b.js)
	return &clockBus{bus: b, clock: clock}
}

// timerBus is a clockBus with one arbiter.
func timerBus(t *testing.T) *clockBus {
	t.Helper()
	b := newClockBus(t)
	b.startArbiter(arbiter.Config{})
	return b
}

// startArbiter runs an arbiter replica on the bus's clock.
func (b *clockBus) startArbiter(cfg arbiter.Config) {
	b.t.Helper()
	cfg.Now = b.clock.Now
	b.bus.startArbiter(cfg)
}

// request is a pending request created now by the clock, expiring after d.
func (b *clockBus) request(d time.Duration, opts ...func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
	b.t.Helper()
	return timedRequest(b.t, b.clock.Now(), d, opts...)
}

// scheduled waits until the arbiter has scheduled timer kind of id at at.
func (b *clockBus) scheduled(id, kind string, at time.Time) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	if err := b.clock.WaitScheduled(ctx, id, kind, at); err != nil {
		b.t.Fatal(err)
	}
}

// catchUp moves the clock on to the wall clock's second, if it is behind:
// the arbiter checks the created_at of a request that time may approve or
// escalate against when the server stored it (within Config.ClockSkew).
func (b *clockBus) catchUp() {
	b.t.Helper()
	if d := time.Now().Truncate(time.Second).Sub(b.clock.Now()); d > 0 {
		b.advance(d)
	}
}

// advance moves the clock by d, firing the timers that come due.
func (b *clockBus) advance(d time.Duration) {
	b.t.Helper()
	if err := b.clock.Advance(context.Background(), d); err != nil {
		b.t.Fatal(err)
	}
}

func terminal(r *contracts.Record) bool { return r.Status != contracts.StatusPending }

// waitDecided waits until id has a decided event and returns them all.
func (b *bus) waitDecided(id string) []contracts.Decided {
	b.t.Helper()
	b.waitMessage(contracts.StreamEvents, contracts.DecidedSubject(id))
	return b.decidedEvents(id)
}

func assertTimedOut(t *testing.T, rec contracts.Record, status string) {
	t.Helper()
	if rec.Status != status {
		t.Fatalf("status %s, want %s", rec.Status, status)
	}
	if rec.Outcome == nil || len(rec.Outcome.DecidedBy) != 1 || rec.Outcome.DecidedBy[0] != contracts.DecidedByTimeout {
		t.Fatalf("outcome %+v, want decided by %s", rec.Outcome, contracts.DecidedByTimeout)
	}
	if rec.Outcome.DecidedAt.Before(rec.ExpiresAt) {
		t.Fatalf("decided at %s, before the deadline %s", rec.Outcome.DecidedAt, rec.ExpiresAt)
	}
}

func TestTimerExpiresPendingRequest(t *testing.T) {
	t.Parallel()
	b := newClockBus(t)
	reg := prometheus.NewRegistry()
	b.startArbiter(arbiter.Config{Registerer: reg})
	req := b.request(time.Hour)
	b.create(req)
	b.scheduled(req.EventID, contracts.TimerExpire, req.ExpiresAt)
	b.advance(time.Hour)
	rec := b.waitRecord(req.EventID, terminal)
	assertTimedOut(t, rec, contracts.StatusExpired)
	d := b.waitDecided(req.EventID)
	if len(d) != 1 || d[0].Status != contracts.StatusExpired {
		t.Fatalf("decided events %+v, want one expired", d)
	}
	// The fire's lateness is measured, by kind, and the decision's time by risk
	// (observed before the outcome is announced).
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil && h.GetSampleCount() > 0 {
				for _, l := range m.GetLabel() {
					seen[mf.GetName()] = l.GetName() + "=" + l.GetValue()
				}
			}
		}
	}
	if seen["countersign_timer_lag_seconds"] != "kind=expire" || seen["countersign_decision_latency_seconds"] != "risk="+req.Risk {
		t.Errorf("histograms observed: %v", seen)
	}
}

func TestTimerOnTimeoutApprove(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	req := b.request(time.Hour, func(r *contracts.ApprovalRequested) {
		r.OnTimeout = contracts.OnTimeoutApprove
		r.Policy.Version = "v1-approve-on-timeout-1h"
	})
	b.create(req)
	b.scheduled(req.EventID, contracts.TimerExpire, req.ExpiresAt)
	b.advance(time.Hour)
	rec := b.waitRecord(req.EventID, terminal)
	assertTimedOut(t, rec, contracts.StatusApproved)
	if d := b.waitDecided(req.EventID); len(d) != 1 || d[0].Status != contracts.StatusApproved {
		t.Fatalf("decided events %+v, want one approved", d)
	}
}

func TestTimerAfterDecisionDoesNothing(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	acks := sniffAcksOf(t, b.srv.Connect(), contracts.StreamTimers, arbiter.DurableTimers)
	req := b.request(time.Hour)
	b.create(req)
	b.scheduled(req.EventID, contracts.TimerExpire, req.ExpiresAt)
	b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID, Decision: contracts.DecisionReject,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}, DecidedAt: b.clock.Now().UTC(),
	})
	decided := b.waitRecord(req.EventID, terminal)
	if decided.Status != contracts.StatusRejected {
		t.Fatalf("status %s, want rejected", decided.Status)
	}
	_, rev := b.record(req.EventID)

	// The deadline passes, and the expiry fires: the decision withdrew
	// its schedule, so the fire is the one a lost withdrawal would leave,
	// published as the server's scheduler does. Wait for the arbiter's
	// acknowledgement of it (given only once it has handled the message).
	b.advance(time.Hour)
	seq := b.publish(contracts.TimerFireSubject(req.EventID, contracts.TimerExpire),
		map[string]any{"event_id": req.EventID, "kind": contracts.TimerExpire, "at": req.ExpiresAt})
	acks.wait(t, seq, "+ACK")
	rec, rev2 := b.record(req.EventID)
	if rev2 != rev || rec.Status != contracts.StatusRejected {
		t.Fatalf("record changed after the fire: status %s revision %d, want rejected at %d", rec.Status, rev2, rev)
	}
	if d := b.decidedEvents(req.EventID); len(d) != 1 {
		t.Fatalf("%d decided events, want 1", len(d))
	}
}

// TestDecidedApprovalsTimersAreWithdrawn runs on the server's own
// scheduler: once an approval is decided, none of its timers is left in
// the store (no schedule, no subject), so decided history costs the
// store nothing for its timers, and nothing of it fires.
func TestDecidedApprovalsTimersAreWithdrawn(t *testing.T) {
	t.Parallel()
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{Now: time.Now})
	req := timedRequest(t, time.Now(), time.Hour, ladder([]string{"20m", "40m"},
		contracts.EscalationTier{After: "30m", Approvers: []string{"group:leads"}}))
	b.create(req)
	for _, kind := range []string{contracts.TimerExpire, "remind-1", "remind-2", "escalate-1"} {
		b.waitMessage(contracts.StreamTimers, contracts.TimerScheduleSubject(req.EventID, kind))
	}
	other := timedRequest(t, time.Now(), time.Hour)
	b.create(other)
	b.waitMessage(contracts.StreamTimers, contracts.TimerScheduleSubject(other.EventID, contracts.TimerExpire))

	b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}, DecidedAt: time.Now().UTC(),
	})
	b.waitDecided(req.EventID)
	stream, err := b.js.Stream(context.Background(), contracts.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	subjects := func(id string) map[string]uint64 {
		info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(contracts.SubjectTimerPrefix+"*."+id+".>"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects
	}
	// The withdrawals expire a second after they are stored: the server
	// removes them on its own clock, which no test can move.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(busWait)
	for left := subjects(req.EventID); len(left) > 0; left = subjects(req.EventID) {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the decided approval's timers are still stored: %v", left)
		}
	}
	// The pending approval's expiry stands.
	if left := subjects(other.EventID); len(left) != 1 {
		t.Fatalf("the pending approval's timers: %v, want its expiry schedule", left)
	}
	if rec, _ := b.record(other.EventID); rec.Status != contracts.StatusPending {
		t.Fatalf("the other approval is %s, want pending", rec.Status)
	}
}

func TestTimerExtendMovesExpiry(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	req := b.request(2 * time.Hour)
	b.create(req)
	b.scheduled(req.EventID, contracts.TimerExpire, req.ExpiresAt)
	until := req.ExpiresAt.Add(2 * time.Hour)
	b.command(contracts.Command{
		Spec: contracts.SpecCommand, CommandID: uuid.NewString(), EventID: req.EventID,
		Command: contracts.CommandExtend, By: "alice", Until: until,
	})
	extended := b.waitRecord(req.EventID, func(r *contracts.Record) bool { return !r.ExpiresAt.Equal(req.ExpiresAt) })
	if extended.Status != contracts.StatusPending || !extended.ExpiresAt.Equal(until) {
		t.Fatalf("after extend: status %s expires %s, want pending until %s", extended.Status, extended.ExpiresAt, until)
	}
	// The timer moved with the deadline: nothing fires at the old one.
	b.scheduled(req.EventID, contracts.TimerExpire, until)
	b.advance(2 * time.Hour)
	if fired := b.messages(contracts.StreamTimers, contracts.TimerFireSubject(req.EventID, contracts.TimerExpire)); len(fired) != 0 {
		t.Fatalf("%d expiry timers fired at the old deadline, want none", len(fired))
	}
	b.advance(2 * time.Hour)
	rec := b.waitRecord(req.EventID, terminal)
	assertTimedOut(t, rec, contracts.StatusExpired)
	if rec.Outcome.DecidedAt.Before(until) {
		t.Fatalf("expired at %s, before the extended deadline %s", rec.Outcome.DecidedAt, until)
	}
	if d := b.waitDecided(req.EventID); len(d) != 1 {
		t.Fatalf("%d decided events, want 1", len(d))
	}
}

// TestTimerSurvivesServerRestart runs on the server's own scheduler and the
// wall clock, the path production takes (the other timer tests play the
// scheduler with a fake clock).
func TestTimerSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{Now: time.Now})
	req := timedRequest(t, time.Now(), 5*time.Second)
	b.create(req)
	// The schedule is stored before the record is acknowledged.
	b.waitMessage(contracts.StreamTimers, contracts.TimerScheduleSubject(req.EventID, contracts.TimerExpire))
	b.srv.Restart()
	if time.Now().After(req.ExpiresAt) {
		t.Fatalf("the restart took until after the deadline %s; the test shows nothing", req.ExpiresAt)
	}
	rec := b.waitRecord(req.EventID, terminal)
	assertTimedOut(t, rec, contracts.StatusExpired)
	if d := b.waitDecided(req.EventID); len(d) != 1 {
		t.Fatalf("%d decided events, want 1", len(d))
	}
}

// ladder gives a request reminders and escalation tiers (after its creation).
func ladder(reminders []string, tiers ...contracts.EscalationTier) func(*contracts.ApprovalRequested) {
	return func(r *contracts.ApprovalRequested) {
		r.Reminders = reminders
		r.Escalation = tiers
	}
}

// changes waits until the approval has n changed events of kind and returns them.
func (b *bus) changes(id, kind string, n int) []contracts.Changed {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.ChangedSubject(id)}})
	if err != nil {
		b.t.Fatal(err)
	}
	var out []contracts.Changed
	for len(out) < n {
		m, err := cons.Next(jetstream.FetchMaxWait(busWait))
		if err != nil {
			b.t.Fatalf("%d of %d %s changes of %s: %v", len(out), n, kind, id, err)
		}
		var c contracts.Changed
		if err := json.Unmarshal(m.Data(), &c); err != nil {
			b.t.Fatal(err)
		}
		if c.Change == kind {
			out = append(out, c)
		}
	}
	return out
}

func TestTimerRemindersAreAnnouncedOnceEach(t *testing.T) {
	t.Parallel()
	b := newClockBus(t)
	// Two replicas: each fire is handled by one of them.
	b.startArbiter(arbiter.Config{})
	b.startArbiter(arbiter.Config{})
	acks := sniffAcksOf(t, b.srv.Connect(), contracts.StreamTimers, arbiter.DurableTimers)
	req := b.request(4*time.Hour, ladder([]string{"1h", "2h", "10h"}))
	b.create(req)
	b.scheduled(req.EventID, "remind-1", req.CreatedAt.Add(time.Hour))
	b.scheduled(req.EventID, "remind-2", req.CreatedAt.Add(2*time.Hour))
	b.advance(time.Hour)
	// The second fire waits for the first to be announced: the two
	// replicas would otherwise handle them at once, in either order.
	b.changes(req.EventID, contracts.ChangeReminded, 1)
	b.advance(time.Hour)
	got := b.changes(req.EventID, contracts.ChangeReminded, 2)
	for i, c := range got {
		if c.Step != i+1 || c.Status != contracts.StatusPending {
			t.Errorf("reminder %d: %+v", i+1, c)
		}
		if at := req.CreatedAt.Add(time.Duration(i+1) * time.Hour); c.At.Before(at) {
			t.Errorf("reminder %d announced at %s, before it was due at %s", i+1, c.At, at)
		}
	}
	// The third reminder falls after the deadline: never scheduled.
	if msgs := b.messages(contracts.StreamTimers, contracts.TimerScheduleSubject(req.EventID, "remind-3")); len(msgs) != 0 {
		t.Errorf("a reminder after the deadline was scheduled")
	}
	// Once the second fire is acknowledged, nothing else was announced.
	md, err := b.waitMessage(contracts.StreamTimers, contracts.TimerFireSubject(req.EventID, "remind-2")).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	acks.wait(t, md.Sequence.Stream, "+ACK")
	n := 0
	for _, c := range b.changedEvents(req.EventID) {
		if c.Change == contracts.ChangeReminded {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d reminded events, want exactly 2 with two replicas", n)
	}
}

func TestTimerEscalationAddsApproversAndADecisionStopsTheLadder(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	acks := sniffAcksOf(t, b.srv.Connect(), contracts.StreamTimers, arbiter.DurableTimers)
	req := b.request(6*time.Hour, ladder([]string{"3h"},
		contracts.EscalationTier{After: "1h", Approvers: []string{"mgr"}, Channels: []string{"email"}},
		contracts.EscalationTier{After: "3h", Approvers: []string{"cfo"}}))
	b.create(req)
	for kind, after := range map[string]time.Duration{"escalate-1": time.Hour, "escalate-2": 3 * time.Hour, "remind-1": 3 * time.Hour} {
		b.scheduled(req.EventID, kind, req.CreatedAt.Add(after))
	}
	// Before the tier, the manager is not an approver.
	early := contracts.Vote{Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: "mgr", Via: contracts.ViaNATS}, DecidedAt: b.clock.Now().UTC()}
	b.vote(early)
	rec := b.waitRecord(req.EventID, func(r *contracts.Record) bool { return len(r.RefusedVotes) == 1 })
	if rec.RefusedVotes[0].Reason != contracts.ReasonNotAnApprover || rec.EscalationLevel != 0 {
		t.Fatalf("early vote of the tier's approver: %+v, level %d", rec.RefusedVotes, rec.EscalationLevel)
	}
	b.advance(time.Hour)
	c := b.changes(req.EventID, contracts.ChangeEscalated, 1)[0]
	if c.Step != 1 {
		t.Fatalf("escalated %+v, want step 1", c)
	}
	rec = b.waitRecord(req.EventID, func(r *contracts.Record) bool { return r.EscalationLevel == 1 })
	// Now the manager may approve, and that decides.
	late := early
	late.VoteID = uuid.NewString()
	b.vote(late)
	rec = b.waitRecord(req.EventID, terminal)
	if rec.Status != contracts.StatusApproved || rec.Outcome.DecidedBy[0] != "mgr" {
		t.Fatalf("after the tier: %s by %v", rec.Status, rec.Outcome.DecidedBy)
	}
	_, rev := b.record(req.EventID)
	// The second tier and the reminder fire after the decision (the
	// decision withdrew them: these are the fires a lost withdrawal would
	// leave, published as the scheduler does) and change nothing,
	// announce nothing.
	b.advance(2 * time.Hour)
	for _, kind := range []string{"escalate-2", "remind-1"} {
		seq := b.publish(contracts.TimerFireSubject(req.EventID, kind),
			map[string]any{"event_id": req.EventID, "kind": kind, "at": req.CreatedAt.Add(3 * time.Hour)})
		acks.wait(t, seq, "+ACK")
	}
	after, rev2 := b.record(req.EventID)
	if rev2 != rev || after.EscalationLevel != 1 {
		t.Fatalf("a timer after the decision changed the record: level %d, revision %d → %d", after.EscalationLevel, rev, rev2)
	}
	for _, c := range b.changedEvents(req.EventID) {
		if c.Change == contracts.ChangeReminded || (c.Change == contracts.ChangeEscalated && c.Step != 1) {
			t.Errorf("announced after the decision: %+v", c)
		}
	}
}

func TestEscalateIsMonotonic(t *testing.T) {
	rec := approval.NewRecord(request(t, ladder(nil,
		contracts.EscalationTier{After: "1h", Approvers: []string{"a"}},
		contracts.EscalationTier{After: "2h", Approvers: []string{"b"}})), t0)
	now := t0.Add(3 * time.Hour)
	r := approval.Escalate(rec, 2, now)
	if !r.Changed || r.Record.EscalationLevel != 2 {
		t.Fatalf("escalate to 2: %+v", r)
	}
	for _, level := range []int{1, 2, 3} {
		if res := approval.Escalate(r.Record, level, now); res.Changed || !res.Duplicate {
			t.Errorf("escalate a level-2 record to %d: %+v, want no change", level, res)
		}
	}
	decided := r.Record
	decided.Status = contracts.StatusRejected
	if res := approval.Escalate(rec, 1, now); !res.Changed {
		t.Fatal("a pending record must escalate")
	}
	if res := approval.Escalate(decided, 3, now); res.Changed {
		t.Error("a decided record escalated")
	}
}
