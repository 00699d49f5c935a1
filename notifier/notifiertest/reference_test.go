package notifiertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier"
)

// quirk is one way the reference channel misbehaves; "" is none.
type quirk string

const (
	wrongName         quirk = "wrong-name"          // Name is not the targets' channel
	deliversElsewhere quirk = "delivers-elsewhere"  // everything goes to one address
	badReceipt        quirk = "bad-receipt"         // receipts dated by the wall clock
	bareRequest       quirk = "bare-request"        // a request shows only its id
	noLinks           quirk = "no-links"            // nothing links to Countersign
	remindsAlways     quirk = "reminds-always"      // every request is called a reminder
	silentReminder    quirk = "silent-reminder"     // a reminder reads as the request
	ignoresRef        quirk = "ignores-ref"         // the outcome starts a thread of its own
	vagueOutcome      quirk = "vague-outcome"       // the outcome says "decided" and no more
	needsRef          quirk = "needs-ref"           // an outcome without a Ref is refused
	keyByEvent        quirk = "key-by-event"        // one key for every notification of an approval
	randomKey         quirk = "random-key"          // a new key for every attempt
	sendsTwice        quirk = "sends-twice"         // every message goes out twice, under two keys
	allTransient      quirk = "all-transient"       // permanent errors reported as transient
	allPermanent      quirk = "all-permanent"       // transient errors reported as permanent
	stuckAfterRefusal quirk = "stuck-after-refusal" // a permanent refusal disables the channel
	failureIsFinal    quirk = "failure-is-final"    // a failed notification fails again without a try
	ignoresContext    quirk = "ignores-context"     // delivers with a cancelled context
	hidesCancellation quirk = "hides-cancellation"  // a cancelled context is a plain error
	acceptsAnyAddress quirk = "accepts-any-address" // an address nobody has is "delivered"
	noKindCheck       quirk = "no-kind-check"       // delivers any kind with either method
	leaksSecret       quirk = "leaks-secret"        // errors quote the token
	logsSecret        quirk = "logs-secret"         // the debug log quotes the token
)

// refName is the reference channel's name.
const refName = "memo"

// refToken is the reference channel's credential.
const refToken = "memo-token-5f1c9a77d3"

// refSetup builds the reference channel, with q, against a fresh inbox.
func refSetup(q quirk) func(t *testing.T, env Env) Setup {
	return func(t *testing.T, env Env) Setup {
		in := &inbox{known: map[string]bool{"room-a": true, "room-b": true}}
		ch := &refChannel{in: in, env: env, q: q}
		return Setup{
			Channel: ch,
			Targets: [2]notifier.Target{{Channel: refName, Address: "room-a"}, {Channel: refName, Address: "room-b", Approver: "alice"}},
			Unknown: notifier.Target{Channel: refName, Address: "room-z"},
			Received: func() []Delivery {
				in.mu.Lock()
				defer in.mu.Unlock()
				return slices.Clone(in.got)
			},
			Fail: func(permanent bool) {
				in.mu.Lock()
				defer in.mu.Unlock()
				in.refuse = append(in.refuse, permanent)
			},
			Stop: func() {
				in.mu.Lock()
				defer in.mu.Unlock()
				in.down = true
			},
			Secrets: []string{refToken},
		}
	}
}

// inbox is the reference channel's receiving side, in memory.
type inbox struct {
	mu     sync.Mutex
	known  map[string]bool
	refuse []bool // the next refusals: permanent or not
	down   bool
	got    []Delivery
}

var errRefused = errors.New("memo: refused")

// accept takes d, or refuses it as the inbox was told to.
func (in *inbox) accept(d Delivery) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.down:
		return errors.New("memo: connection refused")
	case !in.known[d.To]:
		return fmt.Errorf("%w: %w: no address %q", notifier.ErrPermanent, errRefused, d.To)
	case len(in.refuse) > 0:
		permanent := in.refuse[0]
		in.refuse = in.refuse[1:]
		if permanent {
			return fmt.Errorf("%w: %w: mailbox closed", notifier.ErrPermanent, errRefused)
		}
		return fmt.Errorf("%w: busy, try later", errRefused)
	}
	in.got = append(in.got, d)
	return nil
}

// refChannel is a channel as the suite wants one, unless a quirk says
// otherwise: the suite's own tests run it as it is, and broken.
type refChannel struct {
	in       *inbox
	env      Env
	q        quirk
	attempts atomic.Int64
	failed   sync.Map // idempotency key → error, with failureIsFinal
	stuck    atomic.Bool
}

func (c *refChannel) Name() string {
	if c.q == wrongName {
		return "memo2"
	}
	return refName
}

func (c *refChannel) Notify(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	reminder := strings.HasPrefix(n.Kind, "reminder.")
	if c.q != noKindCheck && n.Kind != notifier.KindRequested && !reminder && !strings.HasPrefix(n.Kind, "escalation.") {
		return c.fail(n, fmt.Errorf("%w: memo: Notify of %q", notifier.ErrPermanent, n.Kind))
	}
	req := &n.Request
	content := []string{"approval " + req.EventID}
	if c.q != bareRequest {
		title := notifier.Title(req)
		if (reminder && c.q != silentReminder) || c.q == remindsAlways {
			title = "Reminder: " + title
		}
		content = append(content, title, req.Summary)
	}
	content = append(content, c.link(c.env.PublicURL+"/e/"+n.IdempotencyKey()))
	return c.send(ctx, n, "", content)
}

func (c *refChannel) Update(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if c.q != noKindCheck && (n.Kind != notifier.KindDecided || n.Record == nil || !n.Record.Terminal()) {
		return c.fail(n, fmt.Errorf("%w: memo: Update of %q needs a terminal record", notifier.ErrPermanent, n.Kind))
	}
	if n.Ref == "" && c.q == needsRef {
		return c.fail(n, fmt.Errorf("%w: memo: no message to update", notifier.ErrPermanent))
	}
	line := "Decided."
	if n.Record != nil && c.q != vagueOutcome {
		line = notifier.OutcomeLine(n.Record)
	}
	thread := n.Ref
	if c.q == ignoresRef {
		thread = ""
	}
	content := []string{"approval " + n.EventID(), line, c.link(notifier.ApprovalURL(c.env.PublicURL, n.EventID()))}
	return c.send(ctx, n, thread, content)
}

func (c *refChannel) link(u string) string {
	if c.q == noLinks {
		return ""
	}
	return u
}

// send delivers content for n to the inbox, in thread ("" for a thread of
// its own).
func (c *refChannel) send(ctx context.Context, n notifier.Notification, thread string, content []string) (notifier.Receipt, error) {
	key := n.IdempotencyKey()
	switch c.q {
	case keyByEvent:
		key = n.EventID()
	case randomKey:
		key = fmt.Sprintf("%s.%d", key, c.attempts.Add(1))
	}
	if old, ok := c.failed.Load(key); ok && c.q == failureIsFinal {
		return c.fail(n, old.(error))
	}
	if c.stuck.Load() {
		return c.fail(n, fmt.Errorf("%w: memo: disabled", notifier.ErrPermanent))
	}
	if err := ctx.Err(); err != nil && c.q != ignoresContext {
		if c.q == hidesCancellation {
			err = errors.New("memo: gave up")
		}
		return c.fail(n, fmt.Errorf("memo: %w", err))
	}
	if thread == "" {
		thread = key
	}
	to := n.Target.Address
	if c.q == deliversElsewhere {
		to = "room-a"
	}
	d := Delivery{To: to, Key: key, Thread: thread, Content: strings.Join(content, "\n")}
	err := c.in.accept(d)
	// known does not change after setup: it is read without the lock.
	if errors.Is(err, errRefused) && !c.in.known[to] && c.q == acceptsAnyAddress {
		err = nil
	}
	if err == nil && c.q == sendsTwice {
		d.Key += "'"
		err = c.in.accept(d)
	}
	if err != nil {
		if errors.Is(err, notifier.ErrPermanent) && c.q == stuckAfterRefusal {
			c.stuck.Store(true)
		}
		if c.q == failureIsFinal {
			c.failed.Store(key, err)
		}
		return c.fail(n, err)
	}
	msg := "memo delivered"
	if c.q == logsSecret {
		msg += " with " + refToken
	}
	c.env.Logger.Debug(msg, "event_id", n.EventID(), "kind", n.Kind)
	return c.receipt(n, key, nil), nil
}

// fail classifies err as the channel's quirk has it and returns the failed
// receipt.
func (c *refChannel) fail(n notifier.Notification, err error) (notifier.Receipt, error) {
	switch c.q {
	case allTransient:
		err = errors.New(err.Error())
	case allPermanent:
		if !errors.Is(err, notifier.ErrPermanent) {
			err = fmt.Errorf("%w: %w", notifier.ErrPermanent, err)
		}
	case leaksSecret:
		err = fmt.Errorf("%w (with token %s)", err, refToken)
	}
	return c.receipt(n, "", err), err
}

func (c *refChannel) receipt(n notifier.Notification, ref string, err error) notifier.Receipt {
	at := c.env.Now()
	if c.q == badReceipt {
		at = time.Now()
	}
	return notifier.NewReceipt(n, ref, err, at)
}
