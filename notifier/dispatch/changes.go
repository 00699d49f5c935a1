package dispatch

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
)

// handleChange acts on the changes that need telling people: a reminder
// that came due, an escalation tier reached. Other changes are acknowledged.
func (d *Dispatcher) handleChange(ctx context.Context, msg jetstream.Msg) error {
	var ch contracts.Changed
	if err := contracts.Decode(msg.Data(), &ch); err != nil {
		return events.Poison(fmt.Errorf("decode changed event: %w", err))
	}
	if ch.Change != contracts.ChangeReminded && ch.Change != contracts.ChangeEscalated && ch.Change != contracts.ChangeNotifyDue {
		return nil
	}
	if !contracts.ValidEventID(ch.EventID) || ch.Step < 1 {
		return events.Poison(fmt.Errorf("%s event with event_id %q, step %d", ch.Change, ch.EventID, ch.Step))
	}
	rec, err := d.record(ctx, ch.EventID)
	if err != nil {
		return err
	}
	if rec == nil || rec.Terminal() {
		return nil // decided meanwhile: nobody needs chasing
	}
	have, err := d.receipts(ctx, ch.EventID)
	if err != nil {
		return err
	}
	who, err := d.readers(ctx, rec)
	if err != nil {
		return err
	}
	req := notifier.ForRecord(rec) // values the edits added are masked too
	var (
		notes    []notifier.Notification
		problems []Problem
	)
	switch ch.Change {
	case contracts.ChangeReminded:
		voted := map[string]bool{}
		for _, v := range rec.Votes {
			voted[v.Approver.ID] = true
		}
		targets, _ := d.everyone(who, d.cfg.Now())
		for _, t := range targets {
			if t.Approver != "" && voted[t.Approver] {
				continue // reminders go to those who have not voted
			}
			n := notifier.Reminder(req, t, ch.Step)
			n.Record = rec
			if r, ok := have.original(t.Channel, t.Address); ok {
				n.Ref = r.Ref
			}
			notes = append(notes, n)
		}
	case contracts.ChangeEscalated:
		if ch.Step > len(req.Escalation) {
			return events.Poison(fmt.Errorf("escalation step %d of %s has no tier", ch.Step, ch.EventID))
		}
		tier := req.Escalation[ch.Step-1]
		var targets []notifier.Target
		targets, problems = d.routing(who, tier.Approvers, tierRoutes(req, tier, d.cfg.Now()))
		for _, t := range targets {
			notes = append(notes, notifier.Notification{Kind: notifier.KindEscalation(ch.Step), Target: t, Request: req})
		}
	case contracts.ChangeNotifyDue:
		if notes, problems, err = d.stageNotes(ctx, rec, who, ch.Step); err != nil {
			return err
		}
	}
	return d.detach(ctx, msg, func() (time.Duration, error) {
		return d.deliverAll(ctx, notes, problems, req, have)
	})
}

// tierRoutes are where an escalation tier's approvers are told: the tier's
// channels, else the request's routes told so far (see reached).
func tierRoutes(req contracts.ApprovalRequested, tier contracts.EscalationTier, at time.Time) []string {
	if len(tier.Channels) > 0 {
		return tier.Channels
	}
	return reached(&req, at)
}

// everyone returns the targets of a record that who's read rule lets be
// told by at: the request's own (its channels and the notify stages due)
// and those of every escalation tier reached, without duplicates.
func (d *Dispatcher) everyone(who *readers, at time.Time) ([]notifier.Target, []Problem) {
	rec := who.rec
	req := &rec.Request
	targets, problems := d.routing(who, req.Quorum.Approvers, reached(req, at))
	for i := 0; i < rec.EscalationLevel && i < len(req.Escalation); i++ {
		more, p := d.routing(who, req.Escalation[i].Approvers, tierRoutes(*req, req.Escalation[i], at))
		problems = append(problems, p...)
		for _, t := range more {
			if !slices.ContainsFunc(targets, func(x notifier.Target) bool { return x.Channel == t.Channel && x.Address == t.Address }) {
				targets = append(targets, t)
			}
		}
	}
	return targets, problems
}
