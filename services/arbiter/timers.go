package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
)

// timer is the body of a schedule on HITL_TIMERS, copied by the server to
// the fire subject when the schedule is due.
type timer struct {
	EventID string `json:"event_id"`
	Kind    string `json:"kind"`
	// At is the deadline the timer was scheduled for.
	At time.Time `json:"at"`
}

// scheduleAt is when the server fires a timer for deadline: @at takes whole
// seconds, so the deadline is rounded up, never down.
func scheduleAt(deadline time.Time) time.Time {
	at := deadline.Truncate(time.Second)
	if at.Before(deadline) {
		at = at.Add(time.Second)
	}
	return at
}

// scheduleExpiry schedules (or re-schedules, replacing the previous schedule
// on the same subject) the expiry timer of rec at rec.ExpiresAt. The
// schedule is a durable JetStream message schedule: it fires once, on one
// replica's consumer, and survives restarts of the arbiter and the server; a
// schedule that became due while the server was down fires on start.
func (a *Arbiter) scheduleExpiry(ctx context.Context, rec contracts.Record) error {
	id := rec.Request.EventID
	data, err := json.Marshal(timer{EventID: id, Kind: contracts.TimerExpire, At: rec.ExpiresAt})
	if err != nil {
		return err
	}
	_, err = a.cfg.JS.Publish(ctx, contracts.TimerScheduleSubject(id, contracts.TimerExpire), data,
		jetstream.WithScheduleAt(scheduleAt(rec.ExpiresAt)),
		jetstream.WithScheduleTarget(contracts.TimerFireSubject(id, contracts.TimerExpire)))
	if err != nil {
		return fmt.Errorf("schedule expiry of %s: %w", id, err)
	}
	return nil
}

// timerPoint is one reminder or escalation tier of a request, due at At.
type timerPoint struct {
	Kind string
	Step int
	At   time.Time
}

// timerPoints lists the reminders and escalation tiers of req that fall
// before its deadline (later ones could never fire), from the snapshot.
func timerPoints(req *contracts.ApprovalRequested, expiresAt time.Time) []timerPoint {
	var out []timerPoint
	for i, s := range req.Reminders {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			if at := req.CreatedAt.Add(d); at.Before(expiresAt) {
				out = append(out, timerPoint{Kind: contracts.TimerRemindPrefix + strconv.Itoa(i+1), Step: i + 1, At: at})
			}
		}
	}
	for i, tier := range req.Escalation {
		if d, err := time.ParseDuration(tier.After); err == nil && d > 0 {
			if at := req.CreatedAt.Add(d); at.Before(expiresAt) {
				out = append(out, timerPoint{Kind: contracts.TimerEscalatePrefix + strconv.Itoa(i+1), Step: i + 1, At: at})
			}
		}
	}
	// The later stages of a staggered notification (the notifier tells
	// the first ones, due at once, when the request arrives).
	for i, s := range req.Notify {
		if d := s.Delay(); d > 0 {
			if at := req.CreatedAt.Add(d); at.Before(expiresAt) {
				out = append(out, timerPoint{Kind: contracts.TimerNotifyPrefix + strconv.Itoa(i+1), Step: i + 1, At: at})
			}
		}
	}
	return out
}

// scheduleTimers schedules the reminders and escalation tiers of a new
// record still to come after now. A request redelivered later schedules
// only what is still ahead, so a reminder is not fired twice.
func (a *Arbiter) scheduleTimers(ctx context.Context, rec contracts.Record) error {
	id := rec.Request.EventID
	now := a.cfg.Now()
	for _, p := range timerPoints(&rec.Request, rec.ExpiresAt) {
		if !p.At.After(now) {
			continue
		}
		data, err := json.Marshal(timer{EventID: id, Kind: p.Kind, At: p.At})
		if err != nil {
			return err
		}
		if _, err := a.cfg.JS.Publish(ctx, contracts.TimerScheduleSubject(id, p.Kind), data,
			jetstream.WithScheduleAt(scheduleAt(p.At)),
			jetstream.WithScheduleTarget(contracts.TimerFireSubject(id, p.Kind))); err != nil {
			return fmt.Errorf("schedule %s of %s: %w", p.Kind, id, err)
		}
	}
	return nil
}

// cancelledTimerTTL is how long the message that withdraws a timer stays
// on the schedule's subject (the shortest TTL the server takes).
const cancelledTimerTTL = "1s"

// headerTimerCancelled marks the message that withdraws a timer.
const headerTimerCancelled = "Countersign-Timer-Cancelled"

// cancelTimers withdraws the timers of a decided record that are still
// ahead: its expiry (unless it is what decided it) and the reminders,
// escalation tiers and notification stages not yet due. Each schedule's
// subject is rolled up by a plain message (the server drops a subject's
// schedule when a message without one replaces it) that expires a second
// later, so the store keeps no schedule, and soon no subject, for the
// timers of a decided approval, and no fire of them follows.
//
// It is best effort and off the decision's path: the messages are plain
// publishes, not acknowledged. A withdrawal that is lost (a store that
// refuses message TTLs, a dropped connection) leaves the timer to fire,
// and a fire for a decided record changes nothing (handleTimer).
func (a *Arbiter) cancelTimers(rec contracts.Record) {
	id := rec.Request.EventID
	now := a.cfg.Now()
	var kinds []string
	if rec.Status != contracts.StatusExpired {
		kinds = append(kinds, contracts.TimerExpire)
	}
	for _, p := range timerPoints(&rec.Request, rec.ExpiresAt) {
		if p.At.After(now) {
			kinds = append(kinds, p.Kind)
		}
	}
	nc := a.cfg.JS.Conn()
	for _, kind := range kinds {
		msg := &nats.Msg{Subject: contracts.TimerScheduleSubject(id, kind), Header: nats.Header{
			jetstream.MsgRollup:    []string{jetstream.MsgRollupSubject},
			jetstream.MsgTTLHeader: []string{cancelledTimerTTL},
			headerTimerCancelled:   []string{"decided"},
		}}
		if err := nc.PublishMsg(msg); err != nil {
			a.cfg.Logger.Debug("withdrawing a decided approval's timer failed; it will fire and change nothing",
				"event_id", id, "timer", kind, "err", err)
			return
		}
	}
}

// handleTimer applies a fired timer. approval.Expire is pure and idempotent: a fire
// for a record that is already decided, or whose deadline was extended past
// now, changes nothing.
func (a *Arbiter) handleTimer(ctx context.Context, msg jetstream.Msg) error {
	rest := strings.TrimPrefix(msg.Subject(), contracts.SubjectTimerFirePrefix)
	id, kind, ok := strings.Cut(rest, ".")
	if !ok || !contracts.ValidEventID(id) {
		return events.Poison(fmt.Errorf("unexpected timer subject %s", msg.Subject()))
	}
	var step int
	switch {
	case kind == contracts.TimerExpire:
	case strings.HasPrefix(kind, contracts.TimerRemindPrefix), strings.HasPrefix(kind, contracts.TimerEscalatePrefix),
		strings.HasPrefix(kind, contracts.TimerNotifyPrefix):
		_, n, _ := strings.Cut(kind, "-")
		var err error
		if step, err = strconv.Atoi(n); err != nil || step < 1 {
			return events.Poison(fmt.Errorf("bad timer kind %q", kind))
		}
	default:
		return events.Poison(fmt.Errorf("unknown timer kind %q", kind))
	}
	var t timer
	if err := contracts.Decode(msg.Data(), &t); err != nil {
		return events.Poison(fmt.Errorf("decode timer: %w", err))
	}
	if t.EventID != id || t.Kind != kind {
		return events.Poison(errors.New("timer body does not match its subject"))
	}
	if lag := a.cfg.Now().Sub(t.At); lag >= 0 {
		a.m.timerLag.WithLabelValues(timerKindLabel(kind)).Observe(lag.Seconds())
	}
	switch {
	case strings.HasPrefix(kind, contracts.TimerRemindPrefix):
		return a.remind(ctx, msg, id, step, t, contracts.ChangeReminded)
	case strings.HasPrefix(kind, contracts.TimerNotifyPrefix):
		return a.remind(ctx, msg, id, step, t, contracts.ChangeNotifyDue)
	case strings.HasPrefix(kind, contracts.TimerEscalatePrefix):
		return a.escalate(ctx, msg, id, step, t)
	}
	var early time.Duration
	err := a.apply(ctx, msg, op{
		eventID: id,
		apply: func(rec contracts.Record) approval.Result {
			now := a.cfg.Now()
			early = 0
			if rec.Status == contracts.StatusPending && now.Before(rec.ExpiresAt) && t.At.Equal(rec.ExpiresAt) {
				// The timer of the current deadline came before it by this
				// clock (skew with the server): try again once it is due.
				early = rec.ExpiresAt.Sub(now)
			}
			return approval.Expire(rec, now)
		},
		counted: func() *contracts.Changed { return nil },
		refused: func(reason string) *contracts.Changed {
			return &contracts.Changed{Change: contracts.ChangeExtendRefused, Reason: reason} // approval.Expire never refuses
		},
		missing: func() error { return nil }, // the record aged out: nothing to expire
	})
	if err == nil && early > 0 {
		return events.Retry(max(early, 10*time.Millisecond), errors.New("timer fired before its deadline"))
	}
	return err
}

// remind announces reminder step of a pending request (change
// ChangeReminded), or that stage step of its staggered notification is due
// (ChangeNotifyDue); the notifier does the notifying. The record does not
// change; the announcement is de-duplicated by the fired timer's message,
// so a redelivered fire announces once.
func (a *Arbiter) remind(ctx context.Context, msg jetstream.Msg, id string, step int, t timer, change string) error {
	entry, err := a.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // aged out
	}
	if err != nil {
		return err
	}
	var rec contracts.Record
	if err := contracts.DecodeRecord(id, entry.Value(), &rec); err != nil {
		return events.Poison(fmt.Errorf("record %s is unreadable: %w", id, err))
	}
	if rec.Status != contracts.StatusPending {
		return nil // decided: a reminder does nothing
	}
	if now := a.cfg.Now(); now.Before(t.At) {
		return events.Retry(max(t.At.Sub(now), 10*time.Millisecond), errors.New("reminder fired before it was due"))
	}
	if change == contracts.ChangeReminded {
		a.m.reminders.Inc()
	}
	return a.publishChanged(ctx, id, &contracts.Changed{Change: change, Status: rec.Status, Step: step}, entry.Revision(), msgKey(msg))
}

// escalate raises a pending request to escalation level step with
// compare-and-set, so that of any number of fires and replicas one wins,
// and announces it.
func (a *Arbiter) escalate(ctx context.Context, msg jetstream.Msg, id string, step int, t timer) error {
	var early time.Duration
	err := a.apply(ctx, msg, op{
		eventID: id,
		apply: func(rec contracts.Record) approval.Result {
			early = 0
			if now := a.cfg.Now(); now.Before(t.At) && rec.Status == contracts.StatusPending {
				early = t.At.Sub(now)
				return approval.Result{Duplicate: true}
			}
			return approval.Escalate(rec, step, a.cfg.Now())
		},
		counted: func() *contracts.Changed {
			a.m.escalations.Inc()
			return &contracts.Changed{Change: contracts.ChangeEscalated, Step: step}
		},
		refused: func(reason string) *contracts.Changed {
			return &contracts.Changed{Change: contracts.ChangeEscalated, Reason: reason} // approval.Escalate never refuses
		},
		missing: func() error { return nil },
	})
	if err == nil && early > 0 {
		return events.Retry(max(early, 10*time.Millisecond), errors.New("escalation fired before it was due"))
	}
	return err
}

// timerKindLabel is a timer kind without its step: expire, remind, escalate.
func timerKindLabel(kind string) string {
	k, _, _ := strings.Cut(kind, "-")
	return k
}
