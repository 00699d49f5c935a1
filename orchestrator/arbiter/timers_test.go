package arbiter_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/arbiter"
)

// timedRequest is a pending tool approval created now that expires after d,
// on the real clock the timer tests run on.
func timedRequest(t *testing.T, d time.Duration, opts ...func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
	t.Helper()
	now := time.Now().UTC()
	return request(t, append([]func(*contracts.ApprovalRequested){func(r *contracts.ApprovalRequested) {
		r.EventID = "timer-" + uuid.NewString()
		r.CreatedAt = now
		r.ExpiresAt = now.Add(d)
	}}, opts...)...)
}

func timerBus(t *testing.T) *bus {
	t.Helper()
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{Now: time.Now})
	return b
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
	b := timerBus(t)
	req := timedRequest(t, time.Second)
	b.create(req)
	rec := b.waitRecord(req.EventID, terminal)
	assertTimedOut(t, rec, contracts.StatusExpired)
	d := b.waitDecided(req.EventID)
	if len(d) != 1 || d[0].Status != contracts.StatusExpired {
		t.Fatalf("decided events %+v, want one expired", d)
	}
}

func TestTimerOnTimeoutApprove(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	req := timedRequest(t, time.Second, func(r *contracts.ApprovalRequested) { r.OnTimeout = contracts.OnTimeoutApprove })
	b.create(req)
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
	req := timedRequest(t, time.Second)
	b.create(req)
	b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID, Decision: contracts.DecisionReject,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}, DecidedAt: time.Now().UTC(),
	})
	decided := b.waitRecord(req.EventID, terminal)
	if decided.Status != contracts.StatusRejected {
		t.Fatalf("status %s, want rejected", decided.Status)
	}
	_, rev := b.record(req.EventID)

	// Wait for the fire, then for the arbiter's acknowledgement of it: the
	// arbiter acknowledges only once it has handled the message.
	md, err := b.waitMessage(contracts.StreamTimers, contracts.TimerFireSubject(req.EventID, contracts.TimerExpire)).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	acks.wait(t, md.Sequence.Stream, "+ACK")
	rec, rev2 := b.record(req.EventID)
	if rev2 != rev || rec.Status != contracts.StatusRejected {
		t.Fatalf("record changed after the fire: status %s revision %d, want rejected at %d", rec.Status, rev2, rev)
	}
	if d := b.decidedEvents(req.EventID); len(d) != 1 {
		t.Fatalf("%d decided events, want 1", len(d))
	}
}

func TestTimerExtendMovesExpiry(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	req := timedRequest(t, 2*time.Second)
	b.create(req)
	until := req.ExpiresAt.Add(2 * time.Second)
	b.command(contracts.Command{
		Spec: contracts.SpecCommand, CommandID: uuid.NewString(), EventID: req.EventID,
		Command: contracts.CommandExtend, By: "frank", Until: until,
	})
	extended := b.waitRecord(req.EventID, func(r *contracts.Record) bool { return !r.ExpiresAt.Equal(req.ExpiresAt) })
	if extended.Status != contracts.StatusPending || !extended.ExpiresAt.Equal(until) {
		t.Fatalf("after extend: status %s expires %s, want pending until %s", extended.Status, extended.ExpiresAt, until)
	}
	rec := b.waitRecord(req.EventID, terminal)
	assertTimedOut(t, rec, contracts.StatusExpired)
	if rec.Outcome.DecidedAt.Before(until) {
		t.Fatalf("expired at %s, before the extended deadline %s", rec.Outcome.DecidedAt, until)
	}
	if d := b.waitDecided(req.EventID); len(d) != 1 {
		t.Fatalf("%d decided events, want 1", len(d))
	}
}

func TestTimerSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	req := timedRequest(t, 5*time.Second)
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
