package notifier

import (
	"encoding/json"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// This file keeps sensitive argument values inside Countersign. A request
// lists them in contracts.ApprovalRequested.Sensitive; a notification shows
// approval.Mask in their place and links to the inbox, where those who may
// decide the request see them.

// ShownArguments is args (the request's, an edit's or the outcome's) as a
// notification of req shows them: every value req.Sensitive names masked.
func ShownArguments(req *contracts.ApprovalRequested, args json.RawMessage) json.RawMessage {
	if req.Kind == contracts.KindHumanInput {
		return args
	}
	return approval.Redact(args, req.Sensitive)
}

// SensitiveNote says why some values show as the mask, for a request with
// sensitive values; "" otherwise.
func SensitiveNote(req *contracts.ApprovalRequested) string {
	if len(req.Sensitive) == 0 || req.Kind == contracts.KindHumanInput {
		return ""
	}
	return "Values shown as " + approval.Mask + " are sensitive; open the request in Countersign to see them."
}

// Redacted returns n with every sensitive value masked in its request,
// record and outcome event: what a receiver outside Countersign may be
// sent. Hashes are kept: they refer to the real values. n is not changed.
func (n Notification) Redacted() Notification {
	ps := n.Request.Sensitive
	if len(ps) == 0 {
		return n
	}
	n.Request = approval.RedactRequest(n.Request)
	if n.Record != nil {
		rec := approval.RedactRecord(*n.Record)
		n.Record = &rec
	}
	if n.Event != nil {
		ev := *n.Event
		ev.Outcome = approval.RedactOutcome(n.Request.Kind, ev.Outcome, ps)
		n.Event = &ev
	}
	return n
}
