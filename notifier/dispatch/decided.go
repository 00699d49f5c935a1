package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
)

// handleDecided tells every target of the request the outcome: a target
// that was shown the request gets it as an update of what it was shown; one
// whose delivery of the request never happened (the decision came first)
// gets the outcome on its own, once the deliveries still in flight had
// time to finish.
func (d *Dispatcher) handleDecided(ctx context.Context, msg jetstream.Msg) error {
	ev, at, err := decodeDecided(msg)
	if err != nil {
		return err
	}
	waited := d.cfg.Now().Sub(at)
	rec, err := d.record(ctx, ev.EventID)
	if err != nil {
		return err
	}
	if rec == nil || !rec.Terminal() {
		// The record is written before the outcome is announced, so a read
		// that misses it is behind; try again a while. A record still
		// missing after that was removed by retention.
		if waited < 2*time.Minute {
			return events.Retry(time.Second, fmt.Errorf("record %s not terminal yet in this read", ev.EventID))
		}
		d.log.Info("outcome without a terminal record; no updates", "event_id", ev.EventID)
		return nil
	}
	d.observeDecision(rec)
	have, err := d.receipts(ctx, ev.EventID)
	if err != nil {
		return err
	}
	who, err := d.readers(ctx, rec)
	if err != nil {
		return err
	}
	notes, shownAt := d.outcomeUpdates(rec, &ev, have, who)
	// Targets not shown the request: wait while their deliveries may be
	// in flight, then send the outcome alone (a permanently failed
	// delivery is not retried with the outcome).
	unshown := d.unshown(rec, have, who, shownAt)
	late := waited >= d.cfg.DecidedWait
	if late {
		for _, t := range unshown {
			n := notifier.Decided(*rec, t, "")
			n.Event = &ev
			notes = append(notes, n)
		}
	}
	return d.detach(ctx, msg, func() (time.Duration, error) {
		// Outcomes are never held (push shows them whatever the hour).
		if _, err := d.deliverAll(ctx, notes, nil, rec.Request, have); err != nil {
			return 0, err
		}
		if len(unshown) > 0 && !late {
			d.log.Debug("outcome waits for deliveries in flight", "event_id", ev.EventID, "targets", len(unshown))
			return min(time.Second, d.cfg.DecidedWait), nil
		}
		return 0, nil
	})
}

// decodeDecided reads a decided event and when it was stored; an event
// that cannot be read is poison.
func decodeDecided(msg jetstream.Msg) (contracts.Decided, time.Time, error) {
	var ev contracts.Decided
	if err := contracts.Decode(msg.Data(), &ev); err != nil {
		return ev, time.Time{}, events.Poison(fmt.Errorf("decode decided event: %w", err))
	}
	if !contracts.ValidEventID(ev.EventID) {
		return ev, time.Time{}, events.Poison(fmt.Errorf("decided event has an invalid event_id %q", ev.EventID))
	}
	md, err := msg.Metadata()
	if err != nil {
		return ev, time.Time{}, events.Poison(fmt.Errorf("decided event without metadata: %w", err))
	}
	return ev, md.Timestamp, nil
}

// outcomeUpdates are the outcome ev of rec as updates of what each target
// was shown and may still read; shownAt holds every target shown the
// request, by targetKey.
func (d *Dispatcher) outcomeUpdates(rec *contracts.Record, ev *contracts.Decided, have receiptSet, who *readers) (notes []notifier.Notification, shownAt map[string]bool) {
	shownAt = map[string]bool{}
	for _, r := range have.shown() {
		t := notifier.Target{Channel: r.Channel, Address: r.Target, Approver: r.Approver}
		shownAt[targetKey(t)] = true
		if !who.target(t) {
			// Shown once, but they may not read it now (moved to another
			// tenant, removed): the outcome is not theirs to see.
			d.m.notifications.WithLabelValues(t.Channel, notifier.KindDecided, "unreadable").Inc()
			continue
		}
		n := notifier.Decided(*rec, t, r.Ref)
		n.Event = ev
		notes = append(notes, n)
	}
	return notes, shownAt
}

// unshown are the targets of rec, on a channel of this dispatcher, that
// were not shown the request and whose delivery of it did not fail for
// good.
func (d *Dispatcher) unshown(rec *contracts.Record, have receiptSet, who *readers, shownAt map[string]bool) []notifier.Target {
	at := d.cfg.Now()
	if rec.Outcome != nil && !rec.Outcome.DecidedAt.IsZero() {
		at = rec.Outcome.DecidedAt // stages that came due after the decision were never told
	}
	targets, _ := d.everyone(who, at)
	var unshown []notifier.Target
	for _, t := range targets {
		if shownAt[targetKey(t)] {
			continue
		}
		if _, ok := d.channels[t.Channel]; !ok {
			continue
		}
		if failedForGood(have, rec.Request, t) {
			continue
		}
		unshown = append(unshown, t)
	}
	return unshown
}

// targetKey identifies a target by channel and address.
func targetKey(t notifier.Target) string { return t.Channel + "\x00" + t.Address }

// failedForGood reports whether showing req to t failed permanently (or
// was held by the fan-out cap): as a request, a reminder or an escalation.
func failedForGood(have receiptSet, req contracts.ApprovalRequested, t notifier.Target) bool {
	for _, r := range have {
		if r.Status == notifier.ReceiptFailed && r.Channel == t.Channel && r.Target == t.Address &&
			r.Kind != notifier.KindDecided && r.Kind != notifier.KindHeld {
			return true
		}
	}
	return false
}

// observeDecision counts rec's time to decision by its deciding channel,
// once per approval in this process (an outcome handled again, waiting for
// deliveries in flight, is not counted again).
func (d *Dispatcher) observeDecision(rec *contracts.Record) {
	id := rec.Request.EventID
	d.decidedMu.Lock()
	defer d.decidedMu.Unlock()
	if d.decidedSeen[id] {
		return
	}
	if len(d.decidedSeen) >= 10_000 {
		clear(d.decidedSeen)
	}
	d.decidedSeen[id] = true
	d.m.decision.WithLabelValues(notifier.DecisionChannel(rec)).Observe(notifier.TimeToDecision(rec).Seconds())
}
