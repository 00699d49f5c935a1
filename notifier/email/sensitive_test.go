package email_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email/smtptest"
)

// TestPageMasksSensitiveValues: the page an email link opens is reached by
// whoever holds the email, so it masks sensitive values like the email
// does, an edit's too, and shows no hash of arguments with masked values
// (it would confirm a guess of them): the form names them by version, and
// the vote it casts is bound to their hash all the same.
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
		`<input type="hidden" name="a" value="1">`)
	mustNotContain(t, r, "ACME Ltd", "Other Ltd", editedSHA, req.ToolCall.ArgumentsSHA256)

	p.post(tok, url.Values{"decision": {"approve"}, "a": {"1"}})
	votes := p.res.voteCalls()
	if len(votes) != 1 || votes[0].Decision != contracts.DecisionApprove || votes[0].ArgumentsSHA256 != editedSHA {
		t.Fatalf("votes %+v: want one approval bound to the edited arguments", votes)
	}
	p.post(tok, url.Values{"decision": {"approve"}, "a": {"0"}})
	if votes := p.res.voteCalls(); len(votes) != 1 {
		t.Errorf("a vote for arguments an edit replaced was cast: %+v", votes[1:])
	}
}

// TestPageMasksWhatAnEditAdded: a value an edit added that the request's
// rule marks sensitive (record.sensitive) is masked on the page too.
func TestPageMasksWhatAnEditAdded(t *testing.T) {
	const secret = "DE-EDITED-SECRET-IBAN"
	rec := pendingRecord(toolRequest())
	edited := json.RawMessage(`{"amount":4000,"currency":"EUR","iban":"` + secret + `","to":"ACME Ltd"}`)
	rec.Votes = []contracts.Vote{{Spec: contracts.SpecVote, VoteID: "v1", EventID: rec.Request.EventID, Decision: contracts.DecisionEdit,
		Approver: contracts.Approver{ID: "bob", Via: contracts.ViaWeb}, Arguments: edited, DecidedAt: now}}
	rec.Sensitive = []string{"/iban"}
	p := newPages(t, rec)
	tok, _ := p.token(t, "alice")
	r := p.get(tok)
	mustContain(t, r, approval.Mask, "ACME Ltd")
	mustNotContain(t, r, secret)
}

// TestOutcomeEmailMasksWhatAnEditAdded: the outcome email masks a value an
// edit added that the request's rule marks sensitive (record.sensitive).
func TestOutcomeEmailMasksWhatAnEditAdded(t *testing.T) {
	const secret = "DE-EDITED-SECRET-IBAN"
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	rec := decidedRecord()
	edited := json.RawMessage(`{"amount":4000,"currency":"EUR","iban":"` + secret + `","to":"ACME Ltd"}`)
	rec.Votes[0].Arguments, rec.Outcome.Arguments = edited, edited
	rec.Sensitive = []string{"/iban"}
	if _, err := ch.Update(testContext(t), notifier.Decided(rec, aliceTarget(), "")); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	for _, part := range []string{c.Text, c.HTML} {
		if strings.Contains(part, secret) || !strings.Contains(part, approval.Mask) || !strings.Contains(part, "4000") {
			t.Errorf("outcome email: want the edited value masked and the rest shown:\n%s", part)
		}
	}
}
