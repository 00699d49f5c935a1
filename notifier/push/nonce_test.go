package push

import "testing"

// The nonce of a delivery's action, hence its vote id, is pinned: a
// notification redelivered by a later version must cast the same vote.
func TestActionNonceOfADeliveryIsPinned(t *testing.T) {
	a, err := NewActions([]Key{{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef-push")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.nonceFor("idem-key-1", "approve"), "J-wvThUErEK_YSbzhanaqw"; got != want {
		t.Errorf("nonceFor = %q, want the recorded %q", got, want)
	}
}
