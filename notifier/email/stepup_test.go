package email_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email/smtptest"
)

func stepUpRequest() contracts.ApprovalRequested {
	req := toolRequest()
	req.StepUp = contracts.StepUpPasskey
	return req
}

// The email of a request whose rule says step_up: passkey sends the
// approver to the inbox page to sign; its personal link only reviews or
// rejects.
func TestStepUpEmailLinksToTheInboxToSign(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	if _, err := ch.Notify(testContext(t), notifier.Requested(stepUpRequest(), aliceTarget())); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	inbox := publicURL + "/approvals/" + eventID
	for _, want := range []string{notifier.PasskeyNote, "Open in the inbox to sign:\n" + inbox, "Review or reject:\n" + publicURL + "/e/"} {
		if !strings.Contains(c.Text, want) {
			t.Errorf("text lacks %q:\n%s", want, c.Text)
		}
	}
	for _, want := range []string{`href="` + inbox + `"`, ">Open in the inbox to sign</a>", ">Review or reject</a>"} {
		if !strings.Contains(c.HTML, want) {
			t.Errorf("HTML lacks %q:\n%s", want, c.HTML)
		}
	}
	linkToken(t, c.Text) // the personal link is still there, once

	// Without step-up the email is as before.
	if _, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), aliceTarget())); err != nil {
		t.Fatal(err)
	}
	_, c = next(t, srv)
	if strings.Contains(c.Text, "to sign") || !strings.Contains(c.Text, "Review and answer:") {
		t.Errorf("email without step-up:\n%s", c.Text)
	}
}

// The page a personal link opens offers no Approve for a step-up request,
// but the inbox page to sign; an approval posted anyway is not sent, and
// rejecting still works.
func TestStepUpPageOffersNoApprove(t *testing.T) {
	req := stepUpRequest()
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, "alice")
	r := p.get(tok)
	mustContain(t, r, `id="sign-in-inbox"`, `<a href="/approvals/`+eventID+`">Open in the inbox to sign</a>`, `name="decision" value="reject"`)
	mustNotContain(t, r, `name="decision" value="approve"`)

	r = p.post(tok, approveForm(req, ""))
	if r.status != http.StatusBadRequest {
		t.Errorf("approve posted anyway: status %d", r.status)
	}
	mustContain(t, r, "sign with their passkey")
	noVotes(t, p)

	r = p.post(tok, url.Values{"decision": {"reject"}, "comment": {"not now"}, "h": {req.ToolCall.ArgumentsSHA256}})
	if votes := p.res.voteCalls(); r.status != http.StatusOK || len(votes) != 1 || votes[0].Decision != contracts.DecisionReject {
		t.Fatalf("reject: status %d, votes %+v", r.status, votes)
	}
}
