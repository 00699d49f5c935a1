package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
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
// the newest delivered reminder.
func (s receiptSet) shown() []notifier.Receipt {
	idx := map[string]int{}
	var out []notifier.Receipt
	for _, r := range s {
		if r.Status != notifier.ReceiptDelivered || r.Kind == notifier.KindDecided {
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
			r.Kind != notifier.KindDecided && !isReminder(r.Kind) {
			return r, true
		}
	}
	return notifier.Receipt{}, false
}

func isReminder(kind string) bool { return strings.HasPrefix(kind, "reminder.") }

// Receipts reads every receipt published for eventID from the event stream,
// oldest first, with a short-lived ordered consumer.
func Receipts(ctx context.Context, js jetstream.JetStream, eventID string) ([]notifier.Receipt, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.SubjectNotifyPrefix + "*." + eventID},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// Read once and left behind (the notifier may not delete consumers
		// on this stream): the server drops it soon.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("receipts of %s: %w", eventID, err)
	}
	info := cons.CachedInfo()
	if info == nil {
		if info, err = cons.Info(ctx); err != nil {
			return nil, fmt.Errorf("receipts of %s: %w", eventID, err)
		}
	}
	pending := info.NumPending
	var out []notifier.Receipt
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("receipts of %s: %w", eventID, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var r notifier.Receipt
			if json.Unmarshal(m.Data(), &r) == nil && r.EventID == eventID {
				out = append(out, r)
			}
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("receipts of %s: %w", eventID, err)
		}
		if got == 0 {
			return nil, fmt.Errorf("receipts of %s: %d receipts announced but none arrived", eventID, pending)
		}
	}
	return out, nil
}

func (d *Dispatcher) receipts(ctx context.Context, eventID string) (receiptSet, error) {
	return Receipts(ctx, d.cfg.JS, eventID)
}
