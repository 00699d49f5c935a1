package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// CodeReceiptReplayed: POST /v1/receipts/use found the receipt used before
// (409). The same code a verifying tool answers a replayed receipt with.
const CodeReceiptReplayed = "receipt_replayed"

// maxReceiptIDBytes bounds the jti a use names (the arbiter's are 30-odd
// bytes; a receipt is at most 16 KiB in all).
const maxReceiptIDBytes = 1024

// receiptUses is the hitl_receipt_uses bucket, opened when first needed:
// a server whose bucket is missing still serves everything else.
type receiptUses struct {
	mu sync.Mutex
	kv jetstream.KeyValue
}

func (u *receiptUses) bucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.kv == nil {
		kv, err := js.KeyValue(ctx, contracts.BucketReceiptUses)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", contracts.BucketReceiptUses, err)
		}
		u.kv = kv
	}
	return u.kv, nil
}

// receiptUse is the body of POST /v1/receipts/use.
type receiptUse struct {
	// JTI is the receipt's id (its jti claim).
	JTI string `json:"jti"`
	// Exp is the receipt's expiry (Unix seconds), plus any leeway the
	// verifier allows: the use is remembered at least until then.
	Exp int64 `json:"exp"`
}

// receiptUseEntry is the value stored under the jti's key.
type receiptUseEntry struct {
	Exp    int64     `json:"exp"`
	By     string    `json:"by"`
	UsedAt time.Time `json:"used_at"`
}

// UseReceipt records that the receipt jti, valid until exp, is being used
// now: nil the first time, CodeReceiptReplayed (409) every time after,
// from any replica of any tool, across restarts, for as long as the
// receipt is valid. The first writer wins (KV Create).
func (s *Server) UseReceipt(ctx context.Context, p *Principal, jti string, exp int64) *Error {
	switch {
	case jti == "":
		return fieldError(http.StatusBadRequest, CodeInvalidField, "jti", "jti (the receipt's id) is required")
	case len(jti) > maxReceiptIDBytes:
		return fieldError(http.StatusBadRequest, CodeInvalidField, "jti", "jti is longer than %d bytes", maxReceiptIDBytes)
	case exp <= 0:
		return fieldError(http.StatusBadRequest, CodeInvalidField, "exp", "exp (the receipt's expiry, Unix seconds) is required")
	}
	if limit := s.cfg.Now().Add(contracts.ReceiptUseHorizon); exp > limit.Unix() {
		return fieldError(http.StatusBadRequest, CodeInvalidField, "exp",
			"exp is more than %s in the future; no receipt lives that long", contracts.ReceiptUseHorizon)
	}
	kv, err := s.uses.bucket(ctx, s.cfg.JS)
	if err != nil {
		s.log.Warn("api: receipt uses unavailable", "err", err)
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "receipt uses cannot be recorded now; retry shortly")
	}
	value, err := json.Marshal(receiptUseEntry{Exp: exp, By: p.Subject, UsedAt: s.cfg.Now().UTC()})
	if err != nil {
		return errorf(http.StatusInternalServerError, CodeInternal, "the use could not be encoded")
	}
	if _, err := kv.Create(ctx, contracts.ReceiptUseKey(jti), value); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return errorf(http.StatusConflict, CodeReceiptReplayed, "receipt %s was already used", jti)
		}
		s.log.Warn("api: record receipt use", "err", err)
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the use could not be recorded; retry shortly")
	}
	return nil
}

// postReceiptUse answers POST /v1/receipts/use {"jti","exp"}: 200
// {"used":true} the first time, 409 receipt_replayed afterwards. Any
// valid token may ask: a tool verifies receipts with a token of its own.
func (s *Server) postReceiptUse(w http.ResponseWriter, r *http.Request) {
	var body receiptUse
	if aerr := decodeBody(w, r, &body, false); aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := s.UseReceipt(r.Context(), principalFrom(r.Context()), body.JTI, body.Exp); aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Used bool `json:"used"`
	}{true})
}
