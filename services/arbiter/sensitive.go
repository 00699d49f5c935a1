package arbiter

import (
	"context"
	"encoding/json"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/orchestrator/policy"
)

// This file keeps masking whole when an edit brings new values: the
// pointers a request lists as sensitive were computed by the gate for the
// arguments it proposed, and an approver's edit can add a field (an IBAN, a
// card number) those pointers never named. Each counted edit's pointers are
// computed here with the policy version the request names, and added to the
// record (contracts.Record.Sensitive), which every surface masks by.

// maskAll is what an edit whose pointers cannot be computed adds: the
// pointer to the whole value, so that every arguments value is masked.
var maskAll = []string{""}

// editSensitive returns the pointers of the values of args, an edit of
// req's arguments, that are shown masked: those the request's policy
// decision marks (its rule's patterns and sensitive_fields, the tool
// schema), and those the decision the edited call would get marks. It
// fails closed: without the policy version, the whole value is masked.
func (a *Arbiter) editSensitive(ctx context.Context, req *contracts.ApprovalRequested, args json.RawMessage) []string {
	if req.ToolCall == nil || len(args) == 0 {
		return nil
	}
	p, ref, err := a.policies.find(ctx, req.Policy.Version)
	if err != nil || ref != nil {
		a.cfg.Logger.Warn("the sensitive values of an edit could not be computed; its arguments are masked whole",
			"event_id", req.EventID, "policy_version", req.Policy.Version, "err", err)
		return maskAll
	}
	out := p.EvaluateContext(ctx, policy.RequestInput(req)).SensitivePointers(args, req.ToolSchema)
	edited := *req
	tc := *req.ToolCall
	tc.Arguments = args
	edited.ToolCall = &tc
	return append(out, p.EvaluateContext(ctx, policy.RequestInput(&edited)).SensitivePointers(args, req.ToolSchema)...)
}

// withEditSensitive adds to the record res makes the sensitive pointers of
// the edit v, when res counts it.
func (a *Arbiter) withEditSensitive(ctx context.Context, res approval.Result, v *contracts.Vote) approval.Result {
	if !res.Changed || res.Duplicate || res.Refusal != "" || v.Decision != contracts.DecisionEdit {
		return res
	}
	before := len(res.Record.Sensitive)
	res.Record = approval.AddSensitive(res.Record, a.editSensitive(ctx, &res.Record.Request, v.Arguments))
	if len(res.Record.Sensitive) != before {
		res.Encoded = nil
	}
	return res
}
