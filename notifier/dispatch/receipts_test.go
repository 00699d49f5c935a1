package dispatch_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/dispatch"
)

// Receipts finds one approval's receipts among others on every channel, in
// the order they were stored, and nothing for an approval without any.
func TestReceiptsReadsOneApprovalsReceiptsInOrder(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	mine, other, none := uuid.NewString(), uuid.NewString(), uuid.NewString()
	channels := []string{"slack", "email", "webhook"}
	var want []string
	for i := range 30 {
		for _, id := range []string{other, mine} {
			ch := channels[i%len(channels)]
			r := notifier.Receipt{
				Spec: contracts.SpecNotifyReceipt, EventID: id, Channel: ch, Kind: notifier.KindRequested,
				Target: "t" + strconv.Itoa(i), IdempotencyKey: id + ":" + strconv.Itoa(i), Status: notifier.ReceiptDelivered,
				At: time.Now().UTC(),
			}
			if _, err := events.Publish(ctx, js, notifier.ReceiptSubject(ch, id), r, "", nil); err != nil {
				t.Fatal(err)
			}
			if id == mine {
				want = append(want, r.IdempotencyKey)
			}
		}
		// Other traffic on the stream in between.
		if _, err := events.PublishRaw(ctx, js, contracts.DecidedSubject(other), []byte(`{}`), "", nil); err != nil {
			t.Fatal(err)
		}
	}

	got, err := dispatch.Receipts(ctx, js, mine)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d receipts, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.EventID != mine || r.IdempotencyKey != want[i] {
			t.Fatalf("receipt %d: %s of %s, want %s of %s", i, r.IdempotencyKey, r.EventID, want[i], mine)
		}
	}
	if got, err := dispatch.Receipts(ctx, js, none); err != nil || len(got) != 0 {
		t.Fatalf("approval without receipts: %v, %v", got, err)
	}
}

// BenchmarkReceipts reads the receipts of one approval (three receipts, or
// none) from an event stream holding the receipts of 200 and of 20,000
// approvals: the cost must not grow with the stream.
func BenchmarkReceipts(b *testing.B) {
	for _, size := range []int{200, 20_000} {
		b.Run("approvals="+strconv.Itoa(size), func(b *testing.B) {
			srv := eventstest.NewServer(b)
			js := srv.JetStream()
			srv.Provision(js)
			ctx := context.Background()
			ids := make([]string, size)
			for n := range ids {
				ids[n] = uuid.NewString()
				for i, ch := range notifier.DeliveringChannels {
					r := notifier.Receipt{Spec: contracts.SpecNotifyReceipt, EventID: ids[n], Channel: ch, Kind: notifier.KindRequested,
						Target: "t", IdempotencyKey: ids[n] + strconv.Itoa(i), Status: notifier.ReceiptDelivered, At: time.Now().UTC()}
					data, _ := json.Marshal(r)
					if _, err := js.PublishAsync(notifier.ReceiptSubject(ch, ids[n]), data); err != nil {
						b.Fatal(err)
					}
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("receipts not stored within a minute")
			}
			b.Run("three", func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					got, err := dispatch.Receipts(ctx, js, ids[i%len(ids)])
					if err != nil || len(got) != 3 {
						b.Fatalf("%d receipts, %v", len(got), err)
					}
				}
			})
			b.Run("none", func(b *testing.B) {
				for b.Loop() {
					if got, err := dispatch.Receipts(ctx, js, uuid.NewString()); err != nil || len(got) != 0 {
						b.Fatalf("%d receipts, %v", len(got), err)
					}
				}
			})
		})
	}
}
