package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
)

// receiptSet holds the receipts published for one approval, in order.
type receiptSet []notifier.Receipt

// settled reports whether the notification with idempotency key k needs no
// more delivery: it was delivered, or failed for good.
func (s receiptSet) settled(k string) bool {
	for _, r := range s {
		if r.IdempotencyKey == k {
			return true
		}
	}
	return false
}

// shown returns, per (channel, target), the receipt of what an outcome must
// update: the first delivered request (or escalation) notification, else
// the newest delivered reminder. A KindHeld message showed no request and
// is not updated.
func (s receiptSet) shown() []notifier.Receipt {
	idx := map[string]int{}
	var out []notifier.Receipt
	for _, r := range s {
		if r.Status != notifier.ReceiptDelivered || r.Kind == notifier.KindDecided || r.Kind == notifier.KindHeld {
			continue
		}
		k := r.Channel + "\x00" + r.Target
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, r)
			continue
		}
		if isReminder(out[i].Kind) && (!isReminder(r.Kind) || r.At.After(out[i].At)) {
			out[i] = r
		}
	}
	return out
}

// original returns the delivered request or escalation receipt of target
// on channel: the message a reminder refers to.
func (s receiptSet) original(channel, target string) (notifier.Receipt, bool) {
	for _, r := range s {
		if r.Status == notifier.ReceiptDelivered && r.Channel == channel && r.Target == target &&
			r.Kind != notifier.KindDecided && r.Kind != notifier.KindHeld && !isReminder(r.Kind) {
			return r, true
		}
	}
	return notifier.Receipt{}, false
}

func isReminder(kind string) bool { return strings.HasPrefix(kind, "reminder.") }

// maxReceipts bounds the receipts read for one approval: far more than any
// rule's targets, kinds and retries produce.
const maxReceipts = 10_000

// Receipts reads every receipt published for eventID on the given channels
// (the built-in ones when none are given) from the event stream, oldest
// first.
func Receipts(ctx context.Context, js jetstream.JetStream, eventID string, channels ...string) ([]notifier.Receipt, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, contracts.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("receipts of %s: %w", eventID, err)
	}
	if len(channels) == 0 {
		channels = notifier.DeliveringChannels
	}
	return readReceipts(ctx, st, eventID, channels)
}

// readReceipts reads the receipts of eventID on each channel's literal
// subject with message gets (see events.ForEachMsg): no consumer per read,
// and a cost that does not grow with the stream.
func readReceipts(ctx context.Context, st jetstream.Stream, eventID string, channels []string) ([]notifier.Receipt, error) {
	subjects := make([]string, len(channels))
	for i, ch := range channels {
		subjects[i] = notifier.ReceiptSubject(ch, eventID)
	}
	msgs, truncated, err := events.ReadSubjects(ctx, st, subjects, maxReceipts)
	if err == nil && truncated {
		err = fmt.Errorf("more than %d", maxReceipts)
	}
	if err != nil {
		return nil, fmt.Errorf("receipts of %s: %w", eventID, err)
	}
	out := make([]notifier.Receipt, 0, len(msgs))
	for _, m := range msgs {
		var r notifier.Receipt
		if json.Unmarshal(m.Data, &r) == nil && r.EventID == eventID {
			out = append(out, r)
		}
	}
	return out, nil
}

func (d *Dispatcher) receipts(ctx context.Context, eventID string) (receiptSet, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := d.events.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("receipts of %s: %w", eventID, err)
	}
	return readReceipts(ctx, st, eventID, d.channelNames)
}
