package countersigntest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/services/countersigntest"
)

// clockBus is a server with the contract's streams, a clock attached to it
// as its admin user, and the arbiter's connection to schedule with.
type clockBus struct {
	t      *testing.T
	clock  *countersigntest.Clock
	admin  jetstream.JetStream
	arb    jetstream.JetStream
	timers jetstream.Stream
}

func newClockBus(t *testing.T, start time.Time) *clockBus {
	t.Helper()
	srv := eventstest.NewServer(t)
	admin := srv.JetStream()
	srv.Provision(admin)
	timers, err := admin.Stream(context.Background(), contracts.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	clock := countersigntest.NewClock(start)
	clock.Attach(admin)
	return &clockBus{t: t, clock: clock, admin: admin, arb: srv.JetStreamAs(embedded.RoleArbiter), timers: timers}
}

// schedule stores a schedule for timer kind of approval id as the arbiter
// does, with a trace header, and returns its stream sequence.
func (b *clockBus) schedule(id, kind string, at time.Time, body string) uint64 {
	b.t.Helper()
	msg := &nats.Msg{Subject: contracts.TimerScheduleSubject(id, kind), Data: []byte(body), Header: nats.Header{}}
	msg.Header.Set("traceparent", "00-"+id+"-"+kind)
	ack, err := b.arb.PublishMsg(context.Background(), msg,
		jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget(contracts.TimerFireSubject(id, kind)))
	if err != nil {
		b.t.Fatal(err)
	}
	return ack.Sequence
}

// fired returns the messages on the fire subjects of approval id, in
// stream order.
func (b *clockBus) fired(id string) []*jetstream.RawStreamMsg {
	b.t.Helper()
	ctx := context.Background()
	info, err := b.timers.Info(ctx, jetstream.WithSubjectFilter(contracts.SubjectTimerFirePrefix+id+".>"))
	if err != nil {
		b.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := b.timers.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			b.t.Fatal(err)
		}
		if strings.HasPrefix(m.Subject, contracts.SubjectTimerFirePrefix+id+".") {
			out = append(out, m)
		}
	}
	return out
}

// scheduled reports whether the schedule of kind for id is still stored.
func (b *clockBus) scheduled(id, kind string) bool {
	b.t.Helper()
	_, err := b.timers.GetLastMsgForSubject(context.Background(), contracts.TimerScheduleSubject(id, kind))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false
	}
	if err != nil {
		b.t.Fatal(err)
	}
	return true
}

func (b *clockBus) advance(d time.Duration) {
	b.t.Helper()
	if err := b.clock.Advance(context.Background(), d); err != nil {
		b.t.Fatal(err)
	}
}

func TestClockFiresWhatIsDueAsTheServerDoes(t *testing.T) {
	wall := time.Now()
	b := newClockBus(t, wall)
	start := b.clock.Now()
	if !start.Equal(wall.Truncate(time.Second)) {
		t.Fatalf("a clock started at %s reads %s, want the whole second", wall, start)
	}
	// Stored out of order of their times: they fire in order of their times.
	b.schedule("a1", "expire", start.Add(3*time.Hour), `{"kind":"expire"}`)
	b.schedule("a1", "remind-2", start.Add(2*time.Hour), `{"kind":"remind-2"}`)
	b.schedule("a1", "remind-1", start.Add(time.Hour), `{"kind":"remind-1"}`)

	b.advance(90 * time.Minute)
	if got := b.clock.Now(); !got.Equal(start.Add(90 * time.Minute)) {
		t.Fatalf("Now %s after 90m, want %s", got, start.Add(90*time.Minute))
	}
	fired := b.fired("a1")
	if len(fired) != 1 || fired[0].Subject != contracts.TimerFireSubject("a1", "remind-1") || string(fired[0].Data) != `{"kind":"remind-1"}` {
		t.Fatalf("after 90m fired %v, want remind-1's body on its target", subjects(fired))
	}
	// As the server's scheduler: the copy names its schedule, keeps the
	// other headers, drops the scheduling ones; the schedule is purged (on
	// condition, stated in the copy, that it was still the one read).
	h := fired[0].Header
	if h.Get("Nats-Scheduler") != contracts.TimerScheduleSubject("a1", "remind-1") || h.Get("Nats-Schedule-Next") != "purge" ||
		h.Get("traceparent") != "00-a1-remind-1" || h.Get(jetstream.ScheduleHeader) != "" || h.Get(jetstream.ScheduleTargetHeader) != "" ||
		h.Get(jetstream.MsgRollup) != "" || h.Get(jetstream.ExpectedLastSubjSeqSubjHeader) != contracts.TimerScheduleSubject("a1", "remind-1") {
		t.Errorf("fired headers %v", h)
	}
	if b.scheduled("a1", "remind-1") || !b.scheduled("a1", "remind-2") || !b.scheduled("a1", "expire") {
		t.Errorf("after 90m: remind-1 still scheduled %v, remind-2 %v, expire %v; want only remind-1 gone",
			b.scheduled("a1", "remind-1"), b.scheduled("a1", "remind-2"), b.scheduled("a1", "expire"))
	}

	// A jump past both fires both, once each, in the order they fell due.
	b.advance(2 * time.Hour)
	fired = b.fired("a1")
	want := []string{contracts.TimerFireSubject("a1", "remind-1"), contracts.TimerFireSubject("a1", "remind-2"), contracts.TimerFireSubject("a1", "expire")}
	if got := subjects(fired); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("fired %v, want %v", got, want)
	}
	b.advance(0) // nothing is left to fire
	if n := len(b.fired("a1")); n != 3 {
		t.Fatalf("%d fires after advancing again, want still 3", n)
	}
}

func subjects(ms []*jetstream.RawStreamMsg) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Subject)
	}
	return out
}

// A schedule replaced on its subject (an extended deadline) fires at its
// new time, not the old one.
func TestClockFiresAReplacedScheduleAtItsNewTime(t *testing.T) {
	start := time.Now().Truncate(time.Second)
	b := newClockBus(t, start)
	b.schedule("a2", "expire", start.Add(time.Hour), `{"at":"1h"}`)
	b.schedule("a2", "expire", start.Add(2*time.Hour), `{"at":"2h"}`)
	b.advance(time.Hour)
	if fired := b.fired("a2"); len(fired) != 0 {
		t.Fatalf("at the old deadline fired %v, want nothing", subjects(fired))
	}
	b.advance(time.Hour)
	if fired := b.fired("a2"); len(fired) != 1 || string(fired[0].Data) != `{"at":"2h"}` {
		t.Fatalf("at the new deadline fired %d messages, want the replacement once", len(fired))
	}
}

func TestClockWaitScheduled(t *testing.T) {
	start := time.Now().Truncate(time.Second)
	b := newClockBus(t, start)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b.schedule("a3", "expire", start.Add(time.Hour), `{}`)
	// A schedule at another time does not end the wait: ctx does, with an error.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if err := b.clock.WaitScheduled(short, "a3", "expire", start.Add(2*time.Hour)); err == nil {
		t.Fatal("WaitScheduled for a time nothing is scheduled at returned no error")
	}
	// One within the second of the time asked for does.
	if err := b.clock.WaitScheduled(ctx, "a3", "expire", start.Add(time.Hour-300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// So does a replacement stored while it waits.
	done := make(chan error, 1)
	go func() {
		done <- b.clock.WaitScheduled(ctx, "a3", "expire", start.Add(2*time.Hour+300*time.Millisecond))
	}()
	b.schedule("a3", "expire", start.Add(2*time.Hour+time.Second), `{}`) // a deadline rounded up to the second
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestClockRefusesWhatItCannotPlay(t *testing.T) {
	ctx := context.Background()
	detached := countersigntest.NewClock(time.Now())
	if err := detached.Advance(ctx, time.Hour); !errors.Is(err, countersigntest.ErrClockDetached) {
		t.Errorf("Advance of a detached clock: %v, want ErrClockDetached", err)
	}
	b := newClockBus(t, time.Now())
	if err := b.clock.Advance(ctx, -time.Second); err == nil {
		t.Error("a clock went back")
	}
	// A repeating schedule is no timer of the arbiter's: refused, not skipped.
	if _, err := b.admin.Publish(ctx, contracts.TimerScheduleSubject("a4", "expire"), []byte(`{}`),
		jetstream.WithScheduleEvery(time.Hour), jetstream.WithScheduleTarget(contracts.TimerFireSubject("a4", "expire"))); err != nil {
		t.Fatal(err)
	}
	if err := b.clock.Advance(ctx, 2*time.Hour); !errors.Is(err, countersigntest.ErrUnsupportedSchedule) {
		t.Errorf("Advance over an @every schedule: %v, want ErrUnsupportedSchedule", err)
	}
}
