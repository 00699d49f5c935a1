package arbiter_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/services/arbiter"
)

// sensitivePolicy is busPolicy's rule with /iban marked sensitive: a value
// the requested arguments do not have.
const sensitivePolicy = `
version: v1-sensitive
rules:
  - name: refunds
    tools: ["*"]
    action: require_approval
    veto: false
    allow_self_approval: true
    allowed_decisions: [approve, reject, edit, respond]
    sensitive: ["/iban", "/card/*"]
`

// An edit that adds a value the request's rule marks sensitive gets that
// value's pointer added to the record, so every surface masks it.
func TestEditAddsItsSensitivePointersToTheRecord(t *testing.T) {
	t.Parallel()
	b := newClockBus(t)
	b.startArbiter(arbiter.Config{Policies: arbiter.Policies{mustPolicy(t, sensitivePolicy)}})
	req := b.request(time.Hour, func(r *contracts.ApprovalRequested) { r.Policy.Version = "v1-sensitive" })
	b.create(req)
	b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID, Decision: contracts.DecisionEdit,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}, DecidedAt: b.clock.Now().UTC(),
		Arguments: []byte(`{"amount":80,"iban":"DE-EDITED-SECRET-IBAN","card":{"number":"4111","cvv":"123"}}`),
	})
	rec := b.waitRecord(req.EventID, terminal)
	if want := []string{"/card/cvv", "/card/number", "/iban"}; !slices.Equal(rec.Sensitive, want) {
		t.Fatalf("record sensitive %q, want %q", rec.Sensitive, want)
	}
	if len(req.Sensitive) != 0 || len(rec.Request.Sensitive) != 0 {
		t.Fatalf("the request's own list changed: %q", rec.Request.Sensitive)
	}
	shown := approval.RedactRecord(rec)
	if string(shown.Outcome.Arguments) != `{"amount":80,"card":{"cvv":"••••","number":"••••"},"iban":"••••"}` {
		t.Fatalf("outcome shown as %s", shown.Outcome.Arguments)
	}
}
