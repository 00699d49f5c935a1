package notifier

import (
	"errors"
	"time"

	"github.com/countersign/countersign/contracts"
)

// Receipt statuses.
const (
	ReceiptDelivered = contracts.ReceiptDelivered
	ReceiptFailed    = contracts.ReceiptFailed
)

// Receipt records one delivery attempt's result. The notifier publishes it on
// ReceiptSubject(channel, event_id) in HITL_EVENTS, where it joins the
// approval's timeline. It is the contract's receipt message.
type Receipt = contracts.NotifyReceipt

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
