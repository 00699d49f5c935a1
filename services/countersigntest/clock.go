package countersigntest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// Errors of the clock, matched with errors.Is.
var (
	// ErrClockDetached: Advance was called on a clock attached to no server.
	ErrClockDetached = errors.New("countersigntest: the clock plays the scheduler of no server (call Clock.Attach)")
	// ErrUnsupportedSchedule: a schedule on HITL_TIMERS uses a feature the
	// clock does not play (only "@at" schedules with a target, as the
	// arbiter writes them).
	ErrUnsupportedSchedule = errors.New("countersigntest: the clock plays only @at schedules with a target")
)

// Clock is a fake clock for tests of expiry, reminders and escalation, so
// that "an hour later" takes no wall time. Give its Now to every component
// that reads the time (arbiter.Config.Now, orchestrator.Config.Now,
// dispatch.Config.Now) and Attach it to the server: Advance then moves the
// time and plays the server's scheduler for HITL_TIMERS, firing every timer
// that has come due.
//
// The arbiter keeps its timers as JetStream message schedules, which the
// server fires on the wall clock. The clock fires them itself instead, so a
// test's timers must lie ahead of the wall clock for as long as the test
// runs: start the clock at time.Now() and give timers hours of fake time,
// as real timeouts and reminders have (a timer due within seconds of a
// clock started at time.Now() is fired by the server too). The arbiter
// checks the created_at of a request that time may approve or escalate
// against when the server stored it (within arbiter.Config.ClockSkew), so
// create such requests before advancing the clock far.
//
// Now is frozen between calls to Advance; a Clock is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // serializes Advance
	now struct {
		sync.RWMutex
		t time.Time
	}
	js jetstream.JetStream
}

// NewClock returns a clock that reads start, truncated to the second, until
// it is advanced. Schedules take whole seconds (the arbiter rounds a
// deadline up to the next one), so whole durations from a whole second
// fall due exactly when the clock is advanced by them.
func NewClock(start time.Time) *Clock {
	c := &Clock{}
	c.now.t = start.Truncate(time.Second) // and no monotonic reading: the fake time is all there is
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.now.RLock()
	defer c.now.RUnlock()
	return c.now.t
}

// Attach makes the clock the scheduler of HITL_TIMERS on js, the server's
// part: Advance reads the schedules there and publishes the timers that come
// due. In production the server fires them as itself; the clock stands in
// for it with js's user, which must be able to read HITL_TIMERS and publish
// its fire subjects (the admin user, as srv.JetStream() of
// events/eventstest and StartStack's WithClock give it).
func (c *Clock) Attach(js jetstream.JetStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.js = js
}

// Advance moves the clock forward by d (0 fires what is due without moving
// it) and then fires, in order of their time, every schedule on HITL_TIMERS
// due at or before the new time, exactly as the server would: the body and
// headers of the last message on each schedule subject go to its
// Nats-Schedule-Target, and the schedule is purged with the same publish.
// (Unlike the server's, the copy also carries the
// Nats-Expected-Last-Subject-Sequence headers on which it was stored: a
// schedule replaced meanwhile is read again, not purged unseen.)
// It returns once every due timer is published; what the arbiter makes of
// them follows asynchronously (wait on the record or its decided event).
//
// Advance fires only what is scheduled when it is called, and the arbiter
// schedules a request's timers after it creates the record: wait for a
// timer with WaitScheduled before advancing past it.
func (c *Clock) Advance(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("countersigntest: Advance by %s: a clock does not go back", d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.js == nil {
		return ErrClockDetached
	}
	c.now.Lock()
	c.now.t = c.now.t.Add(d)
	now := c.now.t
	c.now.Unlock()
	return c.fireDue(ctx, now)
}

// WaitScheduled waits until the timer kind (contracts.TimerExpire, or a
// reminder or escalation kind such as "remind-1") of approval eventID is
// scheduled within a second of at (schedules take whole seconds), or ctx
// ends. A timer is scheduled once the arbiter has handled the request or
// command that sets it, which is after the record shows it; once fired, it
// is no longer scheduled.
func (c *Clock) WaitScheduled(ctx context.Context, eventID, kind string, at time.Time) error {
	c.mu.Lock()
	js := c.js
	c.mu.Unlock()
	if js == nil {
		return ErrClockDetached
	}
	subject := contracts.TimerScheduleSubject(eventID, kind)
	cons, err := js.OrderedConsumer(ctx, contracts.StreamTimers, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return fmt.Errorf("countersigntest: watch %s: %w", subject, err)
	}
	var last time.Time
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			if !last.IsZero() {
				return fmt.Errorf("countersigntest: %s is scheduled at %s, not within a second of %s: %w", subject, last, at, err)
			}
			return fmt.Errorf("countersigntest: nothing scheduled on %s: %w", subject, err)
		}
		if withdrawn(m.Headers()) {
			continue
		}
		s, err := parseSchedule(subject, 0, m.Headers(), nil)
		if err != nil {
			return err
		}
		if diff := s.at.Sub(at); diff > -time.Second && diff < time.Second {
			return nil
		}
		last = s.at
	}
}

// schedule is the last message on a schedule subject.
type schedule struct {
	subject string
	seq     uint64
	at      time.Time
	target  string
	header  nats.Header
	data    []byte
}

// parseSchedule reads a schedule message as the server does, accepting
// what the clock can play.
func parseSchedule(subject string, seq uint64, h nats.Header, data []byte) (schedule, error) {
	pattern := h.Get(jetstream.ScheduleHeader)
	at, ok := strings.CutPrefix(pattern, "@at ")
	if !ok {
		return schedule{}, fmt.Errorf("%w: %s has the pattern %q", ErrUnsupportedSchedule, subject, pattern)
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return schedule{}, fmt.Errorf("%w: %s has the pattern %q: %v", ErrUnsupportedSchedule, subject, pattern, err)
	}
	target := h.Get(jetstream.ScheduleTargetHeader)
	if target == "" || h.Get(jetstream.ScheduleSourceHeader) != "" || h.Get(jetstream.ScheduleTimeZoneHeader) != "" {
		return schedule{}, fmt.Errorf("%w: %s names no target, or a source or time zone", ErrUnsupportedSchedule, subject)
	}
	return schedule{subject: subject, seq: seq, at: t, target: target, header: h, data: data}, nil
}

// fireDue fires every schedule due at now, oldest time first (the server
// fires what is due together in stream order; a jump past several times
// fires them in the order they fell due).
func (c *Clock) fireDue(ctx context.Context, now time.Time) error {
	stream, err := c.js.Stream(ctx, contracts.StreamTimers)
	if err != nil {
		return fmt.Errorf("countersigntest: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(contracts.SubjectTimerSchedulePrefix+">"))
	if err != nil {
		return fmt.Errorf("countersigntest: list the schedules: %w", err)
	}
	var due []schedule
	for subject := range info.State.Subjects {
		s, ok, err := c.load(ctx, stream, subject)
		if err != nil {
			return err
		}
		if ok && !s.at.After(now) {
			due = append(due, s)
		}
	}
	slices.SortFunc(due, func(a, b schedule) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for _, s := range due {
		if err := c.fire(ctx, stream, s, now); err != nil {
			return err
		}
	}
	return nil
}

// load reads the schedule on subject; ok is false when it has gone (fired).
func (c *Clock) load(ctx context.Context, stream jetstream.Stream, subject string) (schedule, bool, error) {
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return schedule{}, false, nil
	}
	if err != nil {
		return schedule{}, false, fmt.Errorf("countersigntest: read %s: %w", subject, err)
	}
	if withdrawn(m.Header) {
		return schedule{}, false, nil
	}
	s, err := parseSchedule(subject, m.Sequence, m.Header, m.Data)
	return s, err == nil, err
}

// withdrawn reports whether a message on a schedule subject is a plain one
// that replaced the schedule (a decided approval's timer, withdrawn by the
// arbiter): the server drops the schedule, and so does the clock.
func withdrawn(h nats.Header) bool {
	return h.Get(jetstream.ScheduleHeader) == "" && h.Get(jetstream.MsgRollup) == jetstream.MsgRollupSubject
}

// fire publishes s to its target as the server does, on condition that s
// is still the schedule on its subject; a schedule replaced meanwhile (an
// extended deadline) is read again and fired if the new one is due.
func (c *Clock) fire(ctx context.Context, stream jetstream.Stream, s schedule, now time.Time) error {
	for {
		_, err := c.js.PublishMsg(ctx, firedMsg(s), jetstream.WithExpectLastSequenceForSubject(s.seq, s.subject))
		if err == nil {
			return nil
		}
		var je jetstream.JetStreamError
		if !errors.As(err, &je) || je.APIError() == nil ||
			(je.APIError().ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence &&
				je.APIError().ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return fmt.Errorf("countersigntest: fire %s: %w", s.subject, err)
		}
		next, ok, err := c.load(ctx, stream, s.subject)
		if err != nil || !ok || next.at.After(now) {
			return err
		}
		s = next
	}
}

// firedMsg is the message the server's scheduler publishes for s: its body
// and headers, without those of scheduling, de-duplication, expectations,
// TTL and rollup, with the schedule's own TTL and rollup, naming the
// schedule it came from and purging it.
func firedMsg(s schedule) *nats.Msg {
	h := nats.Header{}
	for k, v := range s.header {
		switch {
		case strings.HasPrefix(k, "Nats-Schedule"), strings.HasPrefix(k, "Nats-Expected-"),
			k == jetstream.MsgIDHeader, k == jetstream.MsgTTLHeader, k == jetstream.MsgRollup:
			continue
		}
		h[k] = slices.Clone(v)
	}
	h.Set("Nats-Scheduler", s.subject)
	h.Set("Nats-Schedule-Next", "purge")
	if ttl := s.header.Get(jetstream.ScheduleTTLHeader); ttl != "" {
		h.Set(jetstream.MsgTTLHeader, ttl)
	}
	if rollup := s.header.Get(jetstream.ScheduleRollupHeader); rollup != "" {
		h.Set(jetstream.MsgRollup, rollup)
	}
	return &nats.Msg{Subject: s.target, Header: h, Data: s.data}
}
