package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
)

// handleDecided updates every target that was shown the request.
func (d *Dispatcher) handleDecided(ctx context.Context, msg jetstream.Msg) error {
	var ev contracts.Decided
	if err := json.Unmarshal(msg.Data(), &ev); err != nil {
		return events.Poison(fmt.Errorf("decode decided event: %w", err))
	}
	if !contracts.ValidEventID(ev.EventID) {
		return events.Poison(fmt.Errorf("decided event has an invalid event_id %q", ev.EventID))
	}
	rec, err := d.record(ctx, ev.EventID)
	if err != nil {
		return err
	}
	if rec == nil || !rec.Terminal() {
		// The record is written before the outcome is announced; a missing
		// one was removed by retention. Nothing to show.
		d.log.Info("outcome without a terminal record; no updates", "event_id", ev.EventID)
		return nil
	}
	have, err := d.receipts(ctx, ev.EventID)
	if err != nil {
		return err
	}
	var notes []notifier.Notification
	shownAt := map[string]bool{}
	for _, r := range have.shown() {
		t := notifier.Target{Channel: r.Channel, Address: r.Target, Approver: r.Approver}
		shownAt[t.Channel+"\x00"+t.Address] = true
		n := notifier.Decided(*rec, t, r.Ref)
		n.Event = &ev
		notes = append(notes, n)
	}
	// Deliveries of the request may still be in flight (the decision came
	// fast): wait for their receipts a while before giving up on them.
	targets, _ := Targets(&rec.Request, rec.Request.Channels, d.cfg.People, d.cfg.Endpoints)
	inFlight := 0
	for _, t := range targets {
		if shownAt[t.Channel+"\x00"+t.Address] {
			continue
		}
		if _, ok := d.channels[t.Channel]; !ok {
			continue
		}
		if !have.settled(notifier.Requested(rec.Request, t).IdempotencyKey()) {
			inFlight++
		}
	}
	return d.detach(ctx, msg, func() (time.Duration, error) {
		if err := d.deliverAll(ctx, notes, nil, rec.Request, have); err != nil {
			return 0, err
		}
		if inFlight > 0 {
			if md, err := msg.Metadata(); err == nil && md.Timestamp.Add(d.cfg.DecidedWait).After(d.cfg.Now()) {
				d.log.Debug("outcome waits for deliveries in flight", "event_id", ev.EventID, "targets", inFlight)
				return time.Second, nil
			}
			d.log.Info("outcome gave up waiting for deliveries", "event_id", ev.EventID, "targets", inFlight)
		}
		return 0, nil
	})
}
