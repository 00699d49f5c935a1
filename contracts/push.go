package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// BucketPush holds each person's Web Push subscriptions, one key per
// person (PushKey): the devices whose browsers subscribed through the
// inbox. Written by the API (subscribe, remove) and by the notifier (which
// drops a subscription its push service says is gone); read by the
// notifier when it delivers on the push channel.
const BucketPush = "hitl_push"

// SpecPushDevices names the values of BucketPush.
const SpecPushDevices = "countersign.push-devices/v1"

// PushDevices is a person's Web Push subscriptions: the value under
// PushKey(person) in BucketPush.
type PushDevices struct {
	Spec    string       `json:"spec"`
	Person  string       `json:"person"`
	Devices []PushDevice `json:"devices"`
}

// PushDevice is one subscription (RFC 8030 push resource, RFC 8291 keys)
// of one browser or phone.
type PushDevice struct {
	// ID names the subscription to its person (random, URL-safe).
	ID string `json:"id"`
	// Name is what the person calls the device ("Pixel 9").
	Name string `json:"name,omitempty"`
	// Endpoint is the push resource URL the browser's push service gave.
	Endpoint string `json:"endpoint"`
	// P256DH is the browser's ECDH public key (uncompressed P-256 point)
	// and Auth its 16-byte authentication secret, both base64url.
	P256DH string `json:"p256dh"`
	Auth   string `json:"auth"`
	// Tenants are the person's tenants when they subscribed (for audit;
	// the read rule judges each notification by the live directory).
	Tenants   []string  `json:"tenants,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// LastDeliveredAt is when the device's push service last took a
	// notification for it (zero: never), kept to within
	// PushDeliveredEvery: the notifier writes it at most that often.
	LastDeliveredAt time.Time `json:"last_delivered_at,omitzero"`
}

// PushDeliveredEvery is how often, at most, the notifier writes a
// device's LastDeliveredAt: a person sees when a device last got a
// notification to within this, and a busy approver's pushes do not
// each rewrite their subscriptions.
const PushDeliveredEvery = time.Hour

// PushKey is the key of person's subscriptions in BucketPush: the hex
// SHA-256 of the id, so that any id is a valid key.
func PushKey(person string) string {
	sum := sha256.Sum256([]byte(person))
	return "p." + hex.EncodeToString(sum[:])
}
