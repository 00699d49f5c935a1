package notifier

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// IdempotencyKey returns the de-duplication key of the notification of kind
// about approval eventID to target (an address) on channel: 32 lower-case hex
// digits, the first 128 bits of a SHA-256 over the four components, each
// prefixed with its length so that no two different tuples share an input.
//
// The key is stable: the same tuple gives the same key in every process and
// every version, which is what lets a receiver drop a redelivered
// notification. It fits a Standard Webhooks webhook-id, an email Message-ID
// and a NATS subject token.
func IdempotencyKey(eventID, channel, target, kind string) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range [...]string{eventID, channel, target, kind} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}
