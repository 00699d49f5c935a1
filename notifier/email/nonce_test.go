package email

import (
	"bytes"
	"testing"
)

// The nonce of a delivery's link, hence its vote id, is pinned: a link
// redelivered by a later version must count as the same vote.
func TestNonceOfADeliveryIsPinned(t *testing.T) {
	l, err := NewLinks([]Key{{ID: "2026-07", Secret: bytes.Repeat([]byte{7}, MinSecretLen)}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.nonceFor("idem-key-1"), "GCacUG4pkKSxgbciYV5pgQ"; got != want {
		t.Errorf("nonceFor = %q, want the recorded %q", got, want)
	}
}
