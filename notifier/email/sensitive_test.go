package email_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// TestPageMasksSensitiveValues: the page an email link opens is reached by
// whoever holds the email, so it masks sensitive values like the email
// does, an edit's too, and keeps the hash of the real arguments for the
// vote.
func TestPageMasksSensitiveValues(t *testing.T) {
	req := toolRequest()
	req.Sensitive = []string{"/to"}
	req.Summary = "Transfer 5000 EUR" // the gate masks a summary's sensitive values
	rec := pendingRecord(req)
	edited := json.RawMessage(`{"amount":4000,"currency":"EUR","to":"Other Ltd"}`)
	rec.Votes = []contracts.Vote{{Spec: contracts.SpecVote, VoteID: "v1", EventID: req.EventID, Decision: contracts.DecisionEdit,
		Approver: contracts.Approver{ID: "bob", Via: contracts.ViaWeb}, Arguments: edited, DecidedAt: now}}
	p := newPages(t, rec)
	tok, _ := p.token(t, "alice")
	r := p.get(tok)
	if r.status != http.StatusOK {
		t.Fatalf("GET status %d", r.status)
	}
	editedSHA, _ := contracts.ArgumentsSHA256(edited)
	mustContain(t, r, "&#34;amount&#34;: 4000", approval.Mask, "are sensitive",
		`<input type="hidden" name="h" value="`+editedSHA+`">`)
	mustNotContain(t, r, "ACME Ltd", "Other Ltd")
}
