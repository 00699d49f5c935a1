package client

import (
	"context"
	"net/http"

	"github.com/countersign/countersign/contracts/receipt"
)

type receiptKey struct{}

// WithReceipt returns ctx carrying a call's receipt (a compact JWS), as Run
// hands it to the tool function. A runtime that claims by itself (Claim,
// then record.Claim.Receipt) passes its tool the receipt the same way.
func WithReceipt(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return context.WithValue(ctx, receiptKey{}, token)
}

// Receipt returns the receipt of the call whose tool function runs with
// ctx: the claim's receipt for an approved call, the API's for a call
// allowed by a standing grant or a rule with receipt: true. "" when
// Countersign signed none (the server holds no receipt key, or the policy
// allowed the call without one).
func Receipt(ctx context.Context) string {
	token, _ := ctx.Value(receiptKey{}).(string)
	return token
}

// SetReceiptHeader puts the receipt of req's context (Receipt) in req's
// Countersign-Receipt header, where receipt.Middleware reads it, and
// reports whether there was one. Build the request with the context Run
// gave the tool function:
//
//	req, _ := http.NewRequestWithContext(ctx, "POST", toolURL, bytes.NewReader(args))
//	client.SetReceiptHeader(req)
func SetReceiptHeader(req *http.Request) bool {
	token := Receipt(req.Context())
	if token == "" {
		return false
	}
	req.Header.Set(receipt.Header, token)
	return true
}
