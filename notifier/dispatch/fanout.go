package dispatch

import (
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Fan-out cap defaults.
const (
	// DefaultFanoutMax is how many requests one destination is sent on one
	// channel within a window.
	DefaultFanoutMax = 20
	// DefaultFanoutWindow is the window of the fan-out cap.
	DefaultFanoutWindow = time.Minute
)

// FanoutPolicy bounds what one destination is sent, so that a flood of
// requests (one agent token can open thousands in seconds) cannot take
// every approver's attention. Within a window, a destination — a person's
// Slack user or email address, a Slack conversation, an address — gets at
// most Max requests, reminders and escalations on a channel; the next one
// is replaced by one message saying that more requests wait in the inbox
// (notifier.KindHeld), and the rest of the window's are held: not sent, with
// a failed receipt that says so, and listed in the inbox as ever. Outcomes
// update only what was shown, so they are bounded too. Webhook endpoints
// feed automation and audit and are not capped. The count is kept per
// notifier replica.
type FanoutPolicy struct {
	// Max is the cap (default DefaultFanoutMax); negative: no cap.
	Max int
	// Window is its length (default DefaultFanoutWindow). A destination's
	// window starts with the first message it is sent after the last one
	// ended.
	Window time.Duration
}

func (p *FanoutPolicy) setDefaults() {
	if p.Max == 0 {
		p.Max = DefaultFanoutMax
	}
	if p.Window <= 0 {
		p.Window = DefaultFanoutWindow
	}
}

// Verdicts of the fan-out cap on one notification.
type verdict int

const (
	send    verdict = iota // within the cap
	summary                // the first over it: send the KindHeld message instead
	hold                   // over it: send nothing
)

// fanout counts what each destination was sent in its current window.
type fanout struct {
	p FanoutPolicy

	mu    sync.Mutex
	slots map[string]*slot
	// sweepAt is the size of slots at which windows that ended are dropped.
	sweepAt int
}

type slot struct {
	end  time.Time // when the window ends
	sent int
	held int
}

func newFanout(p FanoutPolicy) *fanout {
	p.setDefaults()
	return &fanout{p: p, slots: map[string]*slot{}, sweepAt: 1024}
}

// capped reports whether notifications of kind to channel count against the cap.
func capped(channel, kind string) bool {
	if channel == contracts.ChannelWebhook {
		return false
	}
	return kind == notifier.KindRequested || strings.HasPrefix(kind, "reminder.") || strings.HasPrefix(kind, "escalation.")
}

// admit counts one notification to t at now and says what to do with it,
// and when t's window ends.
func (f *fanout) admit(t notifier.Target, now time.Time) (verdict, time.Time) {
	if f.p.Max < 0 {
		return send, time.Time{}
	}
	key := t.Channel + "\x00" + t.Address
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.slots[key]
	if !ok || !now.Before(s.end) {
		if !ok && len(f.slots) >= f.sweepAt {
			f.sweep(now)
		}
		s = &slot{end: now.Add(f.p.Window)}
		f.slots[key] = s
	}
	switch {
	case s.sent < f.p.Max:
		s.sent++
		return send, s.end
	case s.held == 0:
		s.held++
		return summary, s.end
	default:
		s.held++
		return hold, s.end
	}
}

// sweep drops the windows that ended; f.mu is held.
func (f *fanout) sweep(now time.Time) {
	for k, s := range f.slots {
		if !now.Before(s.end) {
			delete(f.slots, k)
		}
	}
	f.sweepAt = max(1024, 2*len(f.slots))
}
