package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
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

// shown returns, per (channel, target), the newest delivered receipt of a
// request or reminder: what an outcome must update.
func (s receiptSet) shown() []notifier.Receipt {
	idx := map[string]int{}
	var out []notifier.Receipt
	for _, r := range s {
		if r.Status != notifier.ReceiptDelivered || r.Kind == notifier.KindDecided {
			continue
		}
		k := r.Channel + "\x00" + r.Target
		if i, ok := idx[k]; ok {
			out[i] = r
			continue
		}
		idx[k] = len(out)
		out = append(out, r)
	}
	return out
}

// Receipts reads every receipt published for eventID from the event stream,
// oldest first, with a short-lived ordered consumer.
func Receipts(ctx context.Context, js jetstream.JetStream, eventID string) ([]notifier.Receipt, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{contracts.SubjectNotifyPrefix + "*." + eventID},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 30 * time.Second,
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
