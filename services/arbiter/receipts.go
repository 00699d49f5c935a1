package arbiter

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/receipt"
)

// A receipt is a single-use bearer token: whoever holds it first may use
// or burn it. So it is not written in the approval record, which the
// notifier, the resolvers and every reader of the request read. The
// record's claim names the receipt's id (Claim.ReceiptID), written by the
// same compare-and-set as the claim, so exactly one claim gets a receipt;
// the receipt itself is signed once that write has won and is created in
// hitl_receipts, which only the roles that claim read. A claim retried
// after a crash between the two writes signs the missing receipt then,
// with the same id.

// withReceipt gives the claim that res accepts the id of its receipt.
// Without a signer, or for a result that does not accept a claim, res is
// returned as it is.
func (a *Arbiter) withReceipt(res approval.Result) approval.Result {
	rec := res.Record
	if a.cfg.Receipts == nil || !res.Changed || res.Duplicate || rec.Claim == nil || rec.Claim.ReceiptID != "" {
		return res
	}
	if _, ok := receiptClaims(rec); !ok {
		return res
	}
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails; a broken source crashes the program
	claim := *rec.Claim
	claim.ReceiptID = base64.RawURLEncoding.EncodeToString(id[:])
	claim.Receipt = ""
	res.Record.Claim = &claim
	res.Encoded = nil
	return res
}

// issueReceipt signs the receipt that rec's claim names, by the claim
// command's issuer by, and creates it in hitl_receipts, unless it is there
// already. An error leaves the claim to be retried.
func (a *Arbiter) issueReceipt(ctx context.Context, rec contracts.Record, by string) error {
	if a.cfg.Receipts == nil || rec.Claim == nil || rec.Claim.ReceiptID == "" {
		return nil
	}
	kv, err := a.receiptsBucket(ctx)
	if err != nil {
		return err
	}
	id := rec.Request.EventID
	if _, err := kv.Get(ctx, id); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("read receipt %s: %w", id, err)
	}
	c, ok := receiptClaims(rec)
	if !ok {
		return nil
	}
	c.ID = rec.Claim.ReceiptID
	tok, err := a.cfg.Receipts.Sign(c)
	if err != nil {
		a.cfg.Logger.Error("receipt not signed", "event_id", id, "err", err)
		return fmt.Errorf("sign receipt %s: %w", id, err)
	}
	data, err := json.Marshal(contracts.IssuedReceipt{
		Spec: contracts.SpecIssuedReceipt, EventID: id, ClaimID: rec.Claim.ClaimID, By: by, Receipt: tok, IssuedAt: a.cfg.Now().UTC(),
	})
	if err != nil {
		return err
	}
	if _, err := kv.Create(ctx, id, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("store receipt %s: %w", id, err)
	}
	return nil
}

// receiptsBucket opens hitl_receipts once.
func (a *Arbiter) receiptsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	a.receiptsMu.Lock()
	defer a.receiptsMu.Unlock()
	if a.receipts == nil {
		kv, err := a.cfg.JS.KeyValue(ctx, contracts.BucketReceipts)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", contracts.BucketReceipts, err)
		}
		a.receipts = kv
	}
	return a.receipts, nil
}

// receiptClaims are the claims of the receipt of a claimed, approved tool
// call; false for a record that allows no tool call.
func receiptClaims(rec contracts.Record) (receipt.Claims, bool) {
	req := rec.Request
	if rec.Status != contracts.StatusApproved || rec.Outcome == nil || req.ToolCall == nil || rec.Claim == nil {
		return receipt.Claims{}, false
	}
	approvals := 0
	for _, by := range rec.Outcome.DecidedBy {
		if by != contracts.DecidedByTimeout {
			approvals++
		}
	}
	return receipt.Claims{
		EventID: req.EventID, ClaimID: rec.Claim.ClaimID,
		Tenant: req.Run.Tenant, Agent: req.Run.Agent, RunID: req.Run.ID,
		ToolCallID: req.ToolCall.ID, Tool: req.ToolCall.Name,
		ArgsSHA256: rec.Outcome.ArgumentsSHA256, Basis: receipt.BasisApproval,
		DecidedBy: rec.Outcome.DecidedBy,
		Quorum:    &receipt.Quorum{Required: max(1, req.Quorum.Required), Approvals: approvals},
		Rule:      req.Policy.Rule, PolicyVersion: req.Policy.Version,
		StepUp: req.StepUp, Signatures: approval.Signatures(rec),
	}, true
}
