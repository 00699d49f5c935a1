package arbiter

import (
	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/receipt"
)

// withReceipt signs the receipt of a claim that res accepts and puts it in
// the claim, so the receipt is written by the same compare-and-set as the
// claim itself: every reader of the record (the gate's permit, the API's
// claim answer, a claim retried with the same id) gets the same receipt.
// Without a signer, or for a result that does not accept a claim, res is
// returned as it is.
func (a *Arbiter) withReceipt(res approval.Result) approval.Result {
	rec := res.Record
	if a.cfg.Receipts == nil || !res.Changed || res.Duplicate || rec.Claim == nil || rec.Claim.Receipt != "" {
		return res
	}
	c, ok := receiptClaims(rec)
	if !ok {
		return res
	}
	tok, err := a.cfg.Receipts.Sign(c)
	if err != nil {
		// The claim stands: the runner may still run, and a tool that
		// requires receipts refuses the call.
		a.cfg.Logger.Error("receipt not signed", "event_id", rec.Request.EventID, "err", err)
		return res
	}
	claim := *rec.Claim
	claim.Receipt = tok
	res.Record.Claim = &claim
	res.Encoded = nil
	return res
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
	}, true
}
