package slack_test

import (
	"encoding/json"
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

// TestSlackSeesNoHashOfMaskedArguments: a message whose arguments have
// masked values carries no hash of them (it would confirm a guess of the
// masked values), in no block, button or modal; the votes cast from it are
// still bound to the arguments it showed.
func TestSlackSeesNoHashOfMaskedArguments(t *testing.T) {
	req := toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{"approve", "reject", "respond"}
		r.Sensitive = []string{"/to"}
		r.Summary = "Pay 250 EUR"
	})
	hash := req.ToolCall.ArgumentsSHA256
	e := newInteractionEnv(t, req)
	if strings.Contains(string(e.msg.Blocks), hash) {
		t.Fatalf("the message carries the arguments' hash: %s", e.msg.Blocks)
	}
	v := e.openModal(t, slack.ActionRespond)
	if strings.Contains(v.PrivateMetadata, hash) || strings.Contains(string(v.Raw), hash) {
		t.Errorf("the modal carries the arguments' hash: %s", v.PrivateMetadata)
	}
	if got := decodeView(t, e.submit(t, v, slackAlice, "Split it.")); got.ResponseAction != "clear" {
		t.Fatalf("response %+v", got)
	}
	e.h.Wait()
	votes := e.res.Votes()
	if len(votes) != 1 || votes[0].Decision != contracts.DecisionRespond || votes[0].ArgumentsSHA256 != hash {
		t.Fatalf("votes %+v: want one respond vote bound to the request's arguments", votes)
	}
	for _, c := range e.fake.Calls() {
		if strings.Contains(string(c.Body), hash) {
			t.Errorf("%s sent Slack the arguments' hash: %s", c.Method, c.Body)
		}
	}

	e = newInteractionEnv(t, req)
	e.click(t, slack.ActionApprove, slackAlice)
	votes = e.res.Votes()
	if len(votes) != 1 || votes[0].Decision != contracts.DecisionApprove || votes[0].ArgumentsSHA256 != hash {
		t.Fatalf("votes %+v: want one approval bound to the request's arguments", votes)
	}
}

// TestValuesAnEditAddedAreMaskedInSlack: the message of a record whose edit
// added a sensitive value (record.sensitive) masks it, pending and decided,
// and its buttons name the edited arguments by version, not by hash.
func TestValuesAnEditAddedAreMaskedInSlack(t *testing.T) {
	const secret = "DE-EDITED-SECRET-IBAN"
	req := toolRequest(t)
	edited := []byte(`{"amount":250,"currency":"EUR","iban":"` + secret + `","to":"acme"}`)
	editedHash := sha(t, edited)
	rec := pending(req)
	rec.Request.Quorum.Required = 2
	rec.Votes = []contracts.Vote{{Spec: contracts.SpecVote, VoteID: "v1", EventID: req.EventID, Decision: contracts.DecisionEdit,
		Arguments: edited, ArgumentsSHA256: req.ToolCall.ArgumentsSHA256, Approver: contracts.Approver{ID: "bob"}, DecidedAt: t0}}
	rec.Sensitive = []string{"/iban"}
	m := slack.RequestMessage(&rec.Request, rec, slack.RenderOptions{PublicURL: publicURL})
	raw := string(mustJSON(t, m.Blocks))
	if strings.Contains(raw, secret) || !strings.Contains(raw, approval.Mask) || strings.Contains(raw, editedHash) {
		t.Errorf("pending message %s: want the edited value masked and no hash", raw)
	}
	if !strings.Contains(raw, `\"a\":\"1\"`) {
		t.Errorf("pending message %s: want buttons naming the first edit's arguments", raw)
	}

	done := *rec
	done.Status = contracts.StatusApproved
	done.Outcome = &contracts.Outcome{Decision: contracts.DecisionEdit, Arguments: edited, ArgumentsSHA256: editedHash, DecidedBy: []string{"bob", "alice"}, DecidedAt: t0}
	raw = string(mustJSON(t, slack.OutcomeMessage(&done, slack.RenderOptions{}).Blocks))
	if strings.Contains(raw, secret) || !strings.Contains(raw, approval.Mask) {
		t.Errorf("outcome message %s: want the edited value masked", raw)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
