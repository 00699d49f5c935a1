package arbiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/services/arbiter"
)

// waitRequestsAcked waits until the arbiter has acknowledged every request
// it was given: those whose timers it deferred are acknowledged once the
// timers are written or found unneeded.
func (b *bus) waitRequestsAcked() {
	b.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(busWait)
	for {
		cons, err := b.js.Consumer(context.Background(), contracts.StreamRequests, arbiter.DurableRequests)
		if err != nil {
			b.t.Fatal(err)
		}
		if info := cons.CachedInfo(); info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Stream > 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			b.t.Fatal("the arbiter did not acknowledge its requests")
		}
	}
}

func (b *bus) approve(id string) {
	b.t.Helper()
	b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: id, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}, DecidedAt: time.Now().UTC(),
	})
}

// timersStored is how many messages HITL_TIMERS has ever stored.
func (b *bus) timersStored() uint64 {
	b.t.Helper()
	st, err := b.js.Stream(context.Background(), contracts.StreamTimers)
	if err != nil {
		b.t.Fatal(err)
	}
	return st.CachedInfo().State.LastSeq
}

// TestTimersOfAnApprovalDecidedWithinTheDelayAreNeverWritten: with
// DeferTimers, an approval decided before the delay ends has no expiry,
// reminder or escalation schedule written, and so no withdrawal either;
// its request is acknowledged all the same.
func TestTimersOfAnApprovalDecidedWithinTheDelayAreNeverWritten(t *testing.T) {
	t.Parallel()
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{Now: time.Now, DeferTimers: time.Second})
	req := timedRequest(t, time.Now(), time.Hour, ladder([]string{"20m"}, contracts.EscalationTier{After: "30m", Approvers: []string{"group:leads"}}))
	b.create(req)
	b.waitRecord(req.EventID, func(r *contracts.Record) bool { return r.Status == contracts.StatusPending })
	b.approve(req.EventID)
	b.waitDecided(req.EventID)
	b.waitRequestsAcked()
	if n := b.timersStored(); n != 0 {
		t.Fatalf("HITL_TIMERS stored %d messages for an approval decided within the delay, want none", n)
	}
}

// TestTimersOfAnApprovalStillPendingAreWrittenAfterTheDelay: a record
// still pending when the delay ends gets every timer, at its own
// deadline, and its request is acknowledged; a record whose expiry falls
// within the delay gets its schedule at once.
func TestTimersOfAnApprovalStillPendingAreWrittenAfterTheDelay(t *testing.T) {
	t.Parallel()
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{Now: time.Now, DeferTimers: 300 * time.Millisecond})
	req := timedRequest(t, time.Now(), time.Hour, ladder([]string{"20m"}, contracts.EscalationTier{After: "30m", Approvers: []string{"group:leads"}}))
	b.create(req)
	for _, kind := range []string{contracts.TimerExpire, "remind-1", "escalate-1"} {
		b.waitMessage(contracts.StreamTimers, contracts.TimerScheduleSubject(req.EventID, kind))
	}
	b.waitRequestsAcked()

	soon := newBus(t, events.ProvisionConfig{})
	soon.startArbiter(arbiter.Config{Now: time.Now, DeferTimers: time.Hour})
	due := timedRequest(t, time.Now(), 10*time.Minute)
	soon.create(due)
	soon.waitMessage(contracts.StreamTimers, contracts.TimerScheduleSubject(due.EventID, contracts.TimerExpire))
	soon.waitRequestsAcked()
	if rec, _ := b.record(req.EventID); rec.Status != contracts.StatusPending {
		t.Fatalf("record %s, want pending", rec.Status)
	}
}

// TestAStoppedArbiterHandsItsDeferredRequestsBack: an arbiter that stops
// while a request's timers wait hands the request back at once (not after
// the ack wait), and the replica that gets it schedules them.
func TestAStoppedArbiterHandsItsDeferredRequestsBack(t *testing.T) {
	t.Parallel()
	b := newBus(t, events.ProvisionConfig{})
	stop := b.startArbiter(arbiter.Config{Now: time.Now, DeferTimers: time.Hour})
	req := timedRequest(t, time.Now(), 2*time.Hour)
	b.create(req)
	b.waitRecord(req.EventID, func(r *contracts.Record) bool { return r.Status == contracts.StatusPending })
	stop()
	if n := b.timersStored(); n != 0 {
		t.Fatalf("HITL_TIMERS stored %d messages before the delay ended", n)
	}
	b.startArbiter(arbiter.Config{Now: time.Now})
	b.waitMessage(contracts.StreamTimers, contracts.TimerScheduleSubject(req.EventID, contracts.TimerExpire))
	b.waitRequestsAcked()
}
