package approval

import (
	"slices"

	"github.com/countersign/countersign/contracts"
)

// IsApprover reports whether id may decide rec: its request names no
// approvers (any approver may), names id, or adds id in an escalation tier
// the record has reached. Every surface and the arbiter ask this question
// here.
func IsApprover(rec *contracts.Record, id string) bool {
	q := rec.Request.Quorum
	return len(q.Approvers) == 0 || slices.Contains(q.Approvers, id) || inEscalation(*rec, id)
}

// Approvers lists the approvers of rec in order: the request's, then those
// of each escalation tier reached, without repeats. An empty list means any
// approver may decide.
func Approvers(rec *contracts.Record) []string { return chain(*rec) }
