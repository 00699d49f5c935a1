package contracts

import "time"

// BucketReceipts holds the receipts of accepted claims, key <event_id>:
// single-use bearer tokens, so they are kept out of the approval record
// that every role, viewer and channel reads. Only the arbiter writes it;
// the roles that claim (orchestrator, API) read it, and the API gives a
// receipt to its claimant alone.
const BucketReceipts = "hitl_receipts"

// SpecIssuedReceipt names an IssuedReceipt.
const SpecIssuedReceipt = "countersign.receipt.issued/v1"

// IssuedReceipt is the value under <event_id> in the hitl_receipts bucket:
// the receipt the arbiter signed for the approval's accepted claim (whose
// record's Claim.ReceiptID is the receipt's jti). It is created once: a
// claim that loses to another gets none, and a retried claim gets the one
// stored.
type IssuedReceipt struct {
	Spec    string `json:"spec"`
	EventID string `json:"event_id"`
	ClaimID string `json:"claim_id"`
	// By is the claimant: the claim command's issuer.
	By string `json:"by"`
	// Receipt is the compact JWS (see contracts/receipt).
	Receipt  string    `json:"receipt"`
	IssuedAt time.Time `json:"issued_at"`
}
