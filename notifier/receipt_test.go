package notifier_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

func TestNewReceipt(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	n := notifier.Requested(contracts.ApprovalRequested{EventID: event},
		notifier.Target{Channel: contracts.ChannelEmail, Address: "alice@example.com", Approver: "alice"})

	ok := notifier.NewReceipt(n, "<msg-1@example.com>", nil, at)
	want := notifier.Receipt{
		Spec: contracts.SpecNotifyReceipt, EventID: event, Channel: "email", Kind: "requested",
		Target: "alice@example.com", Approver: "alice", IdempotencyKey: n.IdempotencyKey(),
		Status: notifier.ReceiptDelivered, Ref: "<msg-1@example.com>", At: at.UTC(),
	}
	if !reflect.DeepEqual(ok, want) {
		t.Errorf("delivered receipt\n got  %+v\n want %+v", ok, want)
	}

	transient := notifier.NewReceipt(n, "ignored", errors.New("smtp: 451 try later"), at)
	if transient.Status != notifier.ReceiptFailed || transient.Ref != "" || transient.Permanent ||
		transient.Error != "smtp: 451 try later" || transient.IdempotencyKey != n.IdempotencyKey() {
		t.Errorf("transient failure receipt: %+v", transient)
	}

	permanent := notifier.NewReceipt(n, "", fmt.Errorf("%w: 550 no such user", notifier.ErrPermanent), at)
	if permanent.Status != notifier.ReceiptFailed || !permanent.Permanent {
		t.Errorf("permanent failure receipt: %+v", permanent)
	}
}

// TestReceiptJSON pins the receipt's field names, which are part of the
// contract read by the audit timeline.
func TestReceiptJSON(t *testing.T) {
	r := notifier.Receipt{
		Spec: contracts.SpecNotifyReceipt, EventID: event, Channel: "slack", Kind: "decided",
		Target: "C1", IdempotencyKey: "k", Status: notifier.ReceiptDelivered, Ref: "1.2",
		At: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC),
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"spec":"countersign.notify.receipt/v1","event_id":"` + event + `","channel":"slack","kind":"decided",` +
		`"target":"C1","idempotency_key":"k","status":"delivered","ref":"1.2","at":"2026-11-22T09:00:00Z"}`
	if string(data) != want {
		t.Errorf("receipt JSON\n got  %s\n want %s", data, want)
	}
	var back notifier.Receipt
	if err := json.Unmarshal([]byte(`{"spec":"countersign.notify.receipt/v1","future_field":1,"status":"failed"}`), &back); err != nil || back.Status != "failed" {
		t.Errorf("a receipt with an unknown field: %v, %+v", err, back)
	}
}

func TestReceiptSubject(t *testing.T) {
	if got, want := notifier.ReceiptSubject("slack", event), "hitl.notify.slack."+event; got != want {
		t.Errorf("ReceiptSubject = %q, want %q", got, want)
	}
}

func TestValidChannelName(t *testing.T) {
	for _, name := range []string{contracts.ChannelSlack, contracts.ChannelEmail, contracts.ChannelWebhook, contracts.ChannelInbox, "teams_2", "my-bot"} {
		if !contracts.ValidChannelName(name) {
			t.Errorf("ValidChannelName(%q) = false", name)
		}
	}
	for _, name := range []string{"", "Slack", "a.b", "a*", "a>", "a b", "slack\n", "abcdefghijklmnopqrstuvwxyz0123456"} {
		if contracts.ValidChannelName(name) {
			t.Errorf("ValidChannelName(%q) = true", name)
		}
	}
}

func TestDecidedCarriesRecord(t *testing.T) {
	rec := contracts.Record{
		Request: contracts.ApprovalRequested{EventID: event, Summary: "Pay 10 EUR"},
		Status:  contracts.StatusRejected,
		Outcome: &contracts.Outcome{Decision: contracts.DecisionReject, Reason: "no"},
	}
	n := notifier.Decided(rec, notifier.Target{Channel: "slack", Address: "C1"}, "1.2")
	if n.Kind != notifier.KindDecided || n.EventID() != event || n.Ref != "1.2" ||
		n.Record == nil || n.Record.Status != contracts.StatusRejected || n.Request.Summary != "Pay 10 EUR" {
		t.Fatalf("Decided = %+v", n)
	}
}

// countingChannel counts deliveries per idempotency key, as a receiving side
// that drops duplicates (a webhook receiver, a Message-ID aware relay) would see them.
type countingChannel struct {
	mu        sync.Mutex
	delivered map[string]int
}

func (c *countingChannel) Name() string { return "test" }

func (c *countingChannel) deliver(n notifier.Notification) (notifier.Receipt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delivered[n.IdempotencyKey()]++
	return notifier.NewReceipt(n, "ref-"+n.IdempotencyKey()[:8], nil, time.Unix(0, 0)), nil
}

func (c *countingChannel) Notify(_ context.Context, n notifier.Notification) (notifier.Receipt, error) {
	return c.deliver(n)
}

func (c *countingChannel) Update(_ context.Context, n notifier.Notification) (notifier.Receipt, error) {
	return c.deliver(n)
}

var _ notifier.Channel = (*countingChannel)(nil)

// TestRedeliveryKeepsKey delivers the same request twice, as a redelivered
// message would, and checks both attempts carry one key and one Ref.
func TestRedeliveryKeepsKey(t *testing.T) {
	c := &countingChannel{delivered: map[string]int{}}
	req := contracts.ApprovalRequested{EventID: event}
	target := notifier.Target{Channel: c.Name(), Address: "hook-1"}
	first, _ := c.Notify(t.Context(), notifier.Requested(req, target))
	again, _ := c.Notify(t.Context(), notifier.Requested(req, target))
	if first != again {
		t.Errorf("redelivery produced a different receipt:\n %+v\n %+v", first, again)
	}
	if len(c.delivered) != 1 || c.delivered[first.IdempotencyKey] != 2 {
		t.Errorf("delivered = %v, want one key seen twice", c.delivered)
	}
}
