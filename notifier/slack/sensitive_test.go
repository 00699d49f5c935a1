package slack_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/notifier/slack"
)

// TestSensitiveArgumentsAreMaskedAndNotEditedInSlack: the message masks the
// values the request lists as sensitive and says why, and an edit, whose
// modal would show Slack the values, is sent to Countersign instead.
func TestSensitiveArgumentsAreMaskedAndNotEditedInSlack(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{"approve", "reject", "edit"}
		r.Sensitive = []string{"/to"}
		r.Summary = "Pay 250 EUR" // the gate masks a summary's sensitive values
	}))
	msg := string(e.msg.Blocks)
	if strings.Contains(msg, "acme") || !strings.Contains(msg, approval.Mask) || !strings.Contains(msg, "are sensitive") ||
		!strings.Contains(msg, "250") {
		t.Errorf("message blocks %s: want the recipient masked, the amount shown and a note", msg)
	}
	if w := e.click(t, slack.ActionEdit, slackAlice); w.Code != http.StatusOK {
		t.Fatalf("click: HTTP %d", w.Code)
	}
	if len(e.fake.Views()) != 0 {
		t.Errorf("%d modals with the sensitive arguments were opened", len(e.fake.Views()))
	}
	if eph := joined(e.ephemerals()); !strings.Contains(eph, "sensitive") || !strings.Contains(eph, publicURL) {
		t.Errorf("ephemeral %q: want it to send the approver to Countersign", eph)
	}
	for _, c := range e.fake.Calls() {
		if strings.Contains(string(c.Body), "acme") {
			t.Errorf("%s shows the sensitive value: %s", c.Method, c.Body)
		}
	}
	noRefusals(t, e.fake)
}
