package notifier

import (
	"errors"
	"time"

	"github.com/countersign/countersign/contracts"
)

// Receipt statuses.
const (
	ReceiptDelivered = "delivered"
	ReceiptFailed    = "failed"
)

// Receipt records one delivery attempt's result. The notifier publishes it on
// ReceiptSubject(channel, event_id) in HITL_EVENTS, where it joins the
// approval's timeline. Readers accept unknown fields.
type Receipt struct {
	Spec           string `json:"spec"`
	EventID        string `json:"event_id"`
	Channel        string `json:"channel"`
	Kind           string `json:"kind"`
	Target         string `json:"target"`
	Approver       string `json:"approver,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
	Status         string `json:"status"`
	// Ref is the channel's id of what it delivered (a Slack message
	// timestamp, an email Message-ID, a webhook-id), used by a later Update.
	Ref string `json:"ref,omitempty"`
	// Error says why delivery failed; Permanent says a retry cannot help.
	Error     string    `json:"error,omitempty"`
	Permanent bool      `json:"permanent,omitempty"`
	At        time.Time `json:"at"`
}

// NewReceipt returns the receipt of delivering n at time at: delivered with
// ref when err is nil, else failed with err's message.
func NewReceipt(n Notification, ref string, err error, at time.Time) Receipt {
	r := Receipt{
		Spec:           contracts.SpecNotifyReceipt,
		EventID:        n.Request.EventID,
		Channel:        n.Target.Channel,
		Kind:           n.Kind,
		Target:         n.Target.Address,
		Approver:       n.Target.Approver,
		IdempotencyKey: n.IdempotencyKey(),
		Status:         ReceiptDelivered,
		Ref:            ref,
		At:             at.UTC(),
	}
	if err != nil {
		r.Status, r.Ref, r.Error = ReceiptFailed, "", err.Error()
		r.Permanent = errors.Is(err, ErrPermanent)
	}
	return r
}

// ReceiptSubject is where receipts of channel about eventID are published:
// hitl.notify.<channel>.<event_id>.
func ReceiptSubject(channel, eventID string) string {
	return contracts.SubjectNotifyPrefix + channel + "." + eventID
}
