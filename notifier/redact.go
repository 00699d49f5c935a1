package notifier

import (
	"encoding/json"
	"slices"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// This file keeps sensitive argument values inside Countersign. A request
// lists them in contracts.ApprovalRequested.Sensitive, and its record adds
// those of the edits (contracts.Record.Sensitive); a notification shows
// approval.Mask in their place and links to the inbox, where those who may
// decide the request see them.

// ShownArguments is args (the request's, an edit's or the outcome's) as a
// notification of req shows them: every value req.Sensitive names masked.
// A notification about a record carries the record's union in
// req.Sensitive (see ForRecord).
func ShownArguments(req *contracts.ApprovalRequested, args json.RawMessage) json.RawMessage {
	if req.Kind == contracts.KindHumanInput {
		return args
	}
	return approval.Redact(args, req.Sensitive)
}

// ForRecord is rec's request as a notification about rec renders it: its
// Sensitive widened to every pointer the record masks
// (approval.RecordSensitive), so the values an edit added are masked like
// the request's.
func ForRecord(rec *contracts.Record) contracts.ApprovalRequested {
	req := rec.Request
	req.Sensitive = approval.RecordSensitive(rec)
	return req
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
// record and outcome event, and without the arguments hashes (a hash of
// arguments with masked values would confirm a guess of them): what a
// receiver outside Countersign may be sent. n is not changed.
func (n Notification) Redacted() Notification {
	ps := n.Request.Sensitive
	if n.Record != nil {
		rec := *n.Record
		rec.Sensitive = append(slices.Clone(rec.Sensitive), ps...)
		ps = approval.RecordSensitive(&rec)
	}
	if len(ps) == 0 {
		return n
	}
	n.Request.Sensitive = ps
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
