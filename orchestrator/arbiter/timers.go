package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
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

// handleTimer applies a fired timer. Expire is pure and idempotent: a fire
// for a record that is already decided, or whose deadline was extended past
// now, changes nothing.
func (a *Arbiter) handleTimer(ctx context.Context, msg jetstream.Msg) error {
	rest := strings.TrimPrefix(msg.Subject(), contracts.SubjectTimerFirePrefix)
	id, kind, ok := strings.Cut(rest, ".")
	if !ok || !contracts.ValidEventID(id) {
		return events.Poison(fmt.Errorf("unexpected timer subject %s", msg.Subject()))
	}
	if kind != contracts.TimerExpire {
		return events.Poison(fmt.Errorf("unknown timer kind %q", kind))
	}
	var t timer
	if err := json.Unmarshal(msg.Data(), &t); err != nil {
		return events.Poison(fmt.Errorf("decode timer: %w", err))
	}
	if t.EventID != id || t.Kind != kind {
		return events.Poison(errors.New("timer body does not match its subject"))
	}
	var early time.Duration
	err := a.apply(ctx, msg, op{
		eventID: id,
		apply: func(rec contracts.Record) Result {
			now := a.cfg.Now()
			early = 0
			if rec.Status == contracts.StatusPending && now.Before(rec.ExpiresAt) && t.At.Equal(rec.ExpiresAt) {
				// The timer of the current deadline came before it by this
				// clock (skew with the server): try again once it is due.
				early = rec.ExpiresAt.Sub(now)
			}
			return Expire(rec, now)
		},
		counted: func() *contracts.Changed { return nil },
		refused: func(reason string) *contracts.Changed {
			return &contracts.Changed{Change: contracts.ChangeExtendRefused, Reason: reason} // Expire never refuses
		},
		missing: func() error { return nil }, // the record aged out: nothing to expire
	})
	if err == nil && early > 0 {
		return events.Retry(max(early, 10*time.Millisecond), errors.New("timer fired before its deadline"))
	}
	return err
}
