package notifier

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/countersign/countersign/contracts"
)

// DeliveringChannels are the built-in channels that deliver and publish
// receipts (the inbox lists every request and delivers nothing).
var DeliveringChannels = []string{contracts.ChannelSlack, contracts.ChannelEmail, contracts.ChannelPush, contracts.ChannelWebhook}

// Kinds of notification. A kind is part of the idempotency key: two
// notifications of different kinds to the same target are both delivered.
const (
	// KindRequested shows a pending request to a target.
	KindRequested = "requested"
	// KindDecided updates what a target was shown with the outcome.
	KindDecided = "decided"
	// KindHeld is the one message a target gets, in a window of the
	// fan-out cap, once the cap is reached: more requests wait in the
	// inbox, and no more are sent until HeldUntil. It shows nothing of
	// any request; its Request only names the approval that reached the
	// cap, for its receipt.
	KindHeld = "held"
)

// KindEscalation is the kind of the notification that tells the approvers
// added by escalation tier n (counting from 1) about a pending request.
func KindEscalation(n int) string { return "escalation." + strconv.Itoa(n) }

// KindReminder is the kind of the n-th reminder (counting from 1) of a
// pending request, so that each reminder is delivered once.
func KindReminder(n int) string { return "reminder." + strconv.Itoa(n) }

// ErrPermanent marks a delivery error that a retry cannot fix (an unknown
// address, a rejected payload). Channels wrap it (fmt.Errorf("%w: ...",
// ErrPermanent)); the notifier then records a failed receipt instead of
// retrying. Any other error is taken as transient and retried.
var ErrPermanent = errors.New("notifier: permanent delivery failure")

// Channel delivers notifications through one medium. Implementations must be
// safe for concurrent use and must tolerate being called twice with the same
// Notification (see the package documentation): they pass
// Notification.IdempotencyKey to the receiving side.
type Channel interface {
	// Name is the channel's name, a single subject token such as "slack".
	Name() string
	// Notify shows a pending request (KindRequested, a KindReminder or a
	// KindEscalation) to n.Target, or, on a channel that reaches people,
	// tells it that more wait in the inbox (KindHeld). The Receipt's Ref
	// identifies what was delivered so that Update can find it later.
	Notify(ctx context.Context, n Notification) (Receipt, error)
	// Update tells n.Target the request is decided (KindDecided; n.Record
	// holds the terminal record). n.Ref is the Ref of the receipt of the
	// delivered request, or empty when none is known, in which case the
	// channel sends the outcome as a new message.
	Update(ctx context.Context, n Notification) (Receipt, error)
}

// Target is where one notification goes on one channel.
type Target struct {
	// Channel is the channel's name.
	Channel string `json:"channel"`
	// Address is the channel-specific destination: a Slack user or
	// conversation id, an email address, the configured name of a webhook
	// endpoint (never its URL, which may hold a secret), an inbox user id.
	Address string `json:"address"`
	// Approver is the approver this target reaches, empty for a shared
	// destination such as a Slack channel or a webhook endpoint.
	Approver string `json:"approver,omitempty"`
}

// Notification is one thing to deliver to one target.
type Notification struct {
	Kind   string
	Target Target
	// Request is the approval's snapshot: everything a channel renders
	// (summary, tool call or question, risk, expiry, allowed decisions).
	Request contracts.ApprovalRequested
	// Record is the terminal record for KindDecided, the pending record for
	// a reminder (for its progress), nil otherwise.
	Record *contracts.Record
	// Ref is, for KindDecided, the Ref of the request's receipt on this
	// target; for a reminder, the Ref of the message it reminds of (a
	// channel may thread the reminder under it); empty otherwise.
	Ref string
	// Event is, for KindDecided, the outcome as announced on the bus (with
	// the record's revision), when the notifier has it.
	Event *contracts.Decided
	// HeldUntil is, for KindHeld, when the target's window of the fan-out
	// cap ends and requests are sent to it again.
	HeldUntil time.Time
}

// Requested returns the notification that shows req to t.
func Requested(req contracts.ApprovalRequested, t Target) Notification {
	return Notification{Kind: KindRequested, Target: t, Request: req}
}

// Reminder returns the n-th reminder (from 1) of req to t.
func Reminder(req contracts.ApprovalRequested, t Target, n int) Notification {
	return Notification{Kind: KindReminder(n), Target: t, Request: req}
}

// Decided returns the update that tells t the outcome of rec. ref is the Ref
// of the receipt with which the request was delivered to t, or empty.
func Decided(rec contracts.Record, t Target, ref string) Notification {
	return Notification{Kind: KindDecided, Target: t, Request: ForRecord(&rec), Record: &rec, Ref: ref}
}

// Held returns the message that tells t more requests wait in the inbox
// and none are sent until until; req is the request that reached the cap.
func Held(req contracts.ApprovalRequested, t Target, until time.Time) Notification {
	return Notification{Kind: KindHeld, Target: t, Request: req, HeldUntil: until}
}

// EventID is the approval the notification is about.
func (n Notification) EventID() string { return n.Request.EventID }

// IdempotencyKey identifies this notification for de-duplication by the
// receiving side; see IdempotencyKey.
func (n Notification) IdempotencyKey() string {
	return IdempotencyKey(n.Request.EventID, n.Target.Channel, n.Target.Address, n.Kind)
}
