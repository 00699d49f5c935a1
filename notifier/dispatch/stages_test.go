package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/dispatch"
	"github.com/countersign/countersign/services/countersigntest"
)

// settled waits until the durable consumer of stream has handed out and
// seen acknowledged everything stored so far: what was published before
// the call has been handled (a detached delivery is acknowledged when it
// ends).
func (e *env) settled(ctx context.Context, stream, durable string) {
	e.t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := e.js.Consumer(ctx, stream, durable)
		if err == nil {
			info, err := c.Info(ctx)
			if err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 {
				return
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			e.t.Fatalf("consumer %s of %s never settled", durable, stream)
		}
	}
}

// allSettled waits for the arbiter's timers and the notifier's changes.
func (e *env) allSettled(ctx context.Context) {
	e.t.Helper()
	e.settled(ctx, contracts.StreamTimers, "arbiter-timers")
	e.settled(ctx, contracts.StreamEvents, dispatch.DurableChanges)
}

// staged is a request told on push at once and on Slack five minutes later.
func staged(clock *countersigntest.Clock) contracts.ApprovalRequested {
	req := request()
	req.Channels = []string{}
	req.Notify = []contracts.NotifyStage{{Channel: "push"}, {Channel: "slack", After: "5m"}}
	req.CreatedAt = clock.Now().UTC()
	req.ExpiresAt = req.CreatedAt.Add(time.Hour)
	return req
}

// TestStaggeredRouteTellsSlackOnlyAfterItsDelayAndNotWhenDecidedOrOpened
// runs three requests told on push at once and on Slack after five
// minutes, on the test clock: one left alone, one decided first, one that
// alice opened first.
func TestStaggeredRouteTellsSlackOnlyAfterItsDelayAndNotWhenDecidedOrOpened(t *testing.T) {
	clock := countersigntest.NewClock(time.Now())
	e := newEnvOn(t, clock)
	push, slack := newChannel("push", nil), newChannel("slack", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{push, slack}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	alone, decided, opened := staged(clock), staged(clock), staged(clock)
	for _, req := range []contracts.ApprovalRequested{alone, decided, opened} {
		e.publish(req)
		got := e.receiptsFor(req.EventID, 2)
		if got["push alice requested"].Status != notifier.ReceiptDelivered || got["push bob requested"].Status != notifier.ReceiptDelivered {
			t.Fatalf("push receipts of %s: %v", req.EventID, got)
		}
		if err := clock.WaitScheduled(ctx, req.EventID, contracts.TimerNotifyPrefix+"2", req.CreatedAt.Add(5*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	e.vote(decided.EventID, "alice", contracts.DecisionApprove)
	e.waitDecided(decided.EventID)
	e.receiptsFor(decided.EventID, 2) // the outcome updates the pushes
	read := contracts.Read{Spec: contracts.SpecRead, EventID: opened.EventID, Reader: "alice", Surface: "inbox",
		What: contracts.ReadOpened, At: clock.Now().UTC()}
	if _, err := events.Publish(ctx, e.js, contracts.ReadSubject(opened.EventID), read, "", nil); err != nil {
		t.Fatal(err)
	}

	if err := clock.Advance(ctx, 5*time.Minute-time.Second); err != nil {
		t.Fatal(err)
	}
	e.allSettled(ctx)
	if n := len(slack.log); n != 0 {
		t.Fatalf("Slack was told %d times before the stage's delay", n)
	}

	if err := clock.Advance(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ id, to string }{{alone.EventID, "U0ALICE001"}, {alone.EventID, "U0BOB00001"}, {opened.EventID, "U0BOB00001"}} {
		r := e.receipt("slack "+want.to, func(r notifier.Receipt) bool {
			return r.EventID == want.id && r.Channel == "slack" && r.Target == want.to
		})
		if r.Status != notifier.ReceiptDelivered || r.Kind != notifier.KindRequested {
			t.Errorf("slack receipt %+v", r)
		}
	}
	e.allSettled(ctx)
	slack.mu.Lock()
	defer slack.mu.Unlock()
	for _, c := range slack.log {
		if c.N.EventID() == decided.EventID {
			t.Errorf("Slack was told of a request decided before its stage: %+v", c.N.Target)
		}
		if c.N.EventID() == opened.EventID && c.N.Target.Approver == "alice" {
			t.Error("Slack was told alice of a request she had opened")
		}
	}
	if len(slack.log) != 3 {
		t.Errorf("Slack was told %d times, want 3", len(slack.log))
	}
}
