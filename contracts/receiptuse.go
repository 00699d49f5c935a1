package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// BucketReceiptUses records which receipts a tool has used, so that a
// receipt is accepted once across every replica and restart of the tool
// (POST /v1/receipts/use). The key is ReceiptUseKey(jti); an entry is
// created once (KV Create: the first writer wins) and ages out with the
// bucket's TTL, ReceiptUseHorizon. Only the API writes it.
const BucketReceiptUses = "hitl_receipt_uses"

// ReceiptUseHorizon is how far in the future a receipt's exp may be for its
// use to be recorded, and how long the hitl_receipt_uses bucket keeps an
// entry. A receipt lives at most an hour (contracts/receipt.MaxTTL); the
// rest is room for a verifier's leeway on exp. An entry outlives the
// receipt it records, so a replay is refused for as long as the receipt
// would verify.
const ReceiptUseHorizon = 2 * time.Hour

// ReceiptUseKey is the key of a receipt id in hitl_receipt_uses: the hex
// SHA-256 of the jti (any string becomes a valid, fixed-length key).
func ReceiptUseKey(jti string) string {
	sum := sha256.Sum256([]byte(jti))
	return hex.EncodeToString(sum[:])
}
