package contracts

import "encoding/json"

// Bounds of a receipt's configured parts, so the room its record keeps for
// it is known (see ReceiptReserve); contracts/receipt enforces them.
const (
	MaxReceiptKeyIDBytes  = 128
	MaxReceiptIssuerBytes = 256
	// receiptFixed is a receipt without the parts that come from the
	// request: header (alg, typ, kid), claim names, times, jti, claim id,
	// hash, basis, quorum and issuer, before base64url.
	receiptFixed = 640 + MaxReceiptKeyIDBytes + MaxClientIDBytes + MaxReceiptIssuerBytes
	// receiptSignature is a base64url Ed25519 signature and its separators.
	receiptSignature = 90
)

// ReceiptReserve is the room, in encoded bytes, the receipt of a claim of
// req takes in its record: its claims name the request's tenant, agent,
// run, tool call and policy, and the deciders (at most the quorum).
func ReceiptReserve(req *ApprovalRequested) int {
	n := receiptFixed + max(1, req.Quorum.Required)*approverMax
	parts := []string{req.EventID, req.Run.Tenant, req.Run.Agent, req.Run.ID, req.Policy.Rule, req.Policy.Version}
	if req.ToolCall != nil {
		parts = append(parts, req.ToolCall.ID, req.ToolCall.Name)
	}
	for _, s := range parts {
		// json.Marshal is what signs the claims: it escapes HTML as well.
		if b, err := json.Marshal(s); err == nil {
			n += len(b)
		}
	}
	return (n+2)/3*4 + receiptSignature + len(`,"receipt":""`)
}
