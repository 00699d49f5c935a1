package notifier_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

const (
	event   = "0190d1a2-7b3c-7def-8123-456789abcdef"
	address = "U024BE7LH"
)

// TestIdempotencyKeyStable pins the key of fixed tuples. These values were
// also computed by an independent implementation (SHA-256 over four
// length-prefixed components, 8-byte big-endian lengths, first 16 bytes in
// hex). If this test fails, the key changed and receivers would no longer
// recognise redelivered notifications: do not update the values.
func TestIdempotencyKeyStable(t *testing.T) {
	tests := []struct {
		eventID, channel, target, kind string
		want                           string
	}{
		{event, "slack", address, "requested", "f7fdaaf6b890eb43ced32daadf4b9dd0"},
		{"", "", "", "", "66687aadf862bd776c8fc18b8e9f8e20"},
	}
	for _, tt := range tests {
		for range 3 {
			if got := notifier.IdempotencyKey(tt.eventID, tt.channel, tt.target, tt.kind); got != tt.want {
				t.Fatalf("IdempotencyKey(%q, %q, %q, %q) = %s, want %s", tt.eventID, tt.channel, tt.target, tt.kind, got, tt.want)
			}
		}
	}
}

func TestIdempotencyKeyFormat(t *testing.T) {
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, k := range []string{
		notifier.IdempotencyKey(event, "slack", address, "requested"),
		notifier.IdempotencyKey("", "", "", ""),
		notifier.IdempotencyKey(event, "email", "ops@example.com", notifier.KindReminder(12)),
	} {
		if !hex32.MatchString(k) {
			t.Errorf("key %q is not 32 lower-case hex digits", k)
		}
		// Usable as a subject token and a KV key.
		if !contracts.ValidEventID(k) {
			t.Errorf("key %q is not a valid subject token", k)
		}
	}
}

// TestIdempotencyKeyDistinct changes one component at a time, and moves
// characters across component boundaries, and expects a new key each time.
func TestIdempotencyKeyDistinct(t *testing.T) {
	base := [4]string{event, "slack", address, notifier.KindRequested}
	key := func(c [4]string) string { return notifier.IdempotencyKey(c[0], c[1], c[2], c[3]) }
	variants := map[string][4]string{"base": base}
	alt := [4][]string{
		{"0190d1a2-7b3c-7def-8123-456789abcdee", ""},
		{"email", "webhook", "inbox", "Slack", ""},
		{"U024BE7LI", "C024BE7LH", ""},
		{notifier.KindDecided, notifier.KindReminder(1), notifier.KindReminder(2), ""},
	}
	for i, vals := range alt {
		for _, v := range vals {
			c := base
			c[i] = v
			variants[fmt.Sprintf("component %d = %q", i, v)] = c
		}
	}
	// The same characters split differently between components.
	variants["shift 1"] = [4]string{event + "s", "lack", address, notifier.KindRequested}
	variants["shift 2"] = [4]string{event, "slackU", "024BE7LH", notifier.KindRequested}
	variants["shift 3"] = [4]string{event, "slack", address + "r", "equested"}
	variants["joined"] = [4]string{event + "slack", "", address, notifier.KindRequested}
	variants["separator"] = [4]string{event + "\x00slack", "", address, notifier.KindRequested}
	variants["swapped"] = [4]string{"slack", event, address, notifier.KindRequested}

	seen := map[string]string{}
	for name, c := range variants {
		k := key(c)
		if other, ok := seen[k]; ok {
			t.Errorf("%s and %s share key %s", name, other, k)
		}
		seen[k] = name
	}
}

func TestNotificationKeyUsesEventChannelAddressKind(t *testing.T) {
	req := contracts.ApprovalRequested{EventID: event}
	slack := notifier.Target{Channel: contracts.ChannelSlack, Address: address, Approver: "alice"}

	requested := notifier.Requested(req, slack)
	if got, want := requested.IdempotencyKey(), notifier.IdempotencyKey(event, "slack", address, "requested"); got != want {
		t.Fatalf("Requested key = %s, want %s", got, want)
	}
	// Two approvers reached through one shared destination get one delivery.
	bob := slack
	bob.Approver = "bob"
	if notifier.Requested(req, bob).IdempotencyKey() != requested.IdempotencyKey() {
		t.Error("the approver changed the key of a delivery to the same address")
	}
	// The request, each reminder and the outcome are separate deliveries.
	keys := map[string]string{}
	for _, n := range []notifier.Notification{
		requested,
		notifier.Reminder(req, slack, 1),
		notifier.Reminder(req, slack, 2),
		notifier.Decided(contracts.Record{Request: req, Status: contracts.StatusApproved}, slack, "1712345678.000100"),
	} {
		k := n.IdempotencyKey()
		if prev, ok := keys[k]; ok {
			t.Errorf("%s and %s share key %s", n.Kind, prev, k)
		}
		keys[k] = n.Kind
	}
}

// ExampleIdempotencyKey shows the key a webhook channel would send as the
// webhook-id header.
func ExampleIdempotencyKey() {
	fmt.Println(notifier.IdempotencyKey("0190d1a2-7b3c-7def-8123-456789abcdef", contracts.ChannelSlack, "U024BE7LH", notifier.KindRequested))
	// Output: f7fdaaf6b890eb43ced32daadf4b9dd0
}
