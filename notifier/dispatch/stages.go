package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
)

// This file is the staggered notification of a rule (notify: a list of
// routes, each told after its delay while the request is pending): the
// request's channels and the stages due at once are told when it arrives;
// each later stage is told when the arbiter announces it due
// (contracts.ChangeNotifyDue, from a timer on HITL_TIMERS), except to
// those who opened the approval meanwhile. Reminders, escalations and
// outcomes reach the routes told so far, in the same order.

// reached are the routes of req told by at: its channels, then each stage
// of its notify list due by then, in order, each once.
func reached(req *contracts.ApprovalRequested, at time.Time) []string {
	out := slices.Clone(req.Channels)
	for _, s := range req.Notify {
		if !req.CreatedAt.Add(s.Delay()).After(at) && !slices.Contains(out, s.Channel) {
			out = append(out, s.Channel)
		}
	}
	return out
}

// maxOpenings bounds the read records looked at for one approval.
const maxOpenings = 1000

// openers are the people who opened the approval: its inbox page, a push
// notification's action, or a read of its sensitive arguments (the read
// records on hitl.approval.read.<event_id>).
func (d *Dispatcher) openers(ctx context.Context, eventID string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := d.events.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("openings of %s: %w", eventID, err)
	}
	msgs, _, err := events.ReadSubjects(ctx, st, []string{contracts.ReadSubject(eventID)}, maxOpenings)
	if err != nil {
		return nil, fmt.Errorf("openings of %s: %w", eventID, err)
	}
	out := map[string]bool{}
	for _, m := range msgs {
		var r contracts.Read
		if json.Unmarshal(m.Data, &r) == nil && r.EventID == eventID && (r.What == contracts.ReadOpened || r.What == contracts.ReadRecord) {
			out[r.Reader] = true
		}
	}
	return out, nil
}

// stageNotes are the notifications of stage step (from 1) of rec's notify
// list: its route's targets, less those who opened the approval (a
// destination of nobody in particular is left out once anyone has).
func (d *Dispatcher) stageNotes(ctx context.Context, rec *contracts.Record, who *readers, step int) ([]notifier.Notification, []Problem, error) {
	req := notifier.ForRecord(rec)
	if step > len(req.Notify) {
		return nil, nil, events.Poison(fmt.Errorf("notify stage %d of %s is not in its notify list", step, req.EventID))
	}
	opened, err := d.openers(ctx, req.EventID)
	if err != nil {
		return nil, nil, err
	}
	targets, problems := d.routing(who, req.Quorum.Approvers, []string{req.Notify[step-1].Channel})
	var notes []notifier.Notification
	for _, t := range targets {
		if (t.Approver != "" && opened[t.Approver]) || (t.Approver == "" && len(opened) > 0) {
			d.m.notifications.WithLabelValues(t.Channel, notifier.KindRequested, "opened").Inc()
			continue
		}
		notes = append(notes, notifier.Requested(req, t))
	}
	return notes, problems, nil
}
