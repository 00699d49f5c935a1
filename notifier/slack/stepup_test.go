package slack_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/slack"
)

// A request whose rule says step_up: passkey cannot be approved from
// Slack (a click carries no passkey signature): its message has no
// Approve, Edit or run button, but a first, primary link to the inbox page
// to sign there, says why, and keeps Reject and Respond.
func TestStepUpRequestLinksToTheInboxToSign(t *testing.T) {
	stepUp := func(r *contracts.ApprovalRequested) {
		r.StepUp = contracts.StepUpPasskey
		r.AllowedDecisions = []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond}
	}
	fake := newFake(t)
	m := notify(t, fake, newChannel(t, fake), toolRequest(t, stepUp))
	noRefusals(t, fake)
	if got, want := actionIDs(m), []string{slack.ActionOpen, slack.ActionReject, slack.ActionRespond}; !slices.Equal(got, want) {
		t.Fatalf("buttons %v, want %v", got, want)
	}
	open := m.Buttons()[0]
	if open.Text != notifier.SignInInbox || open.URL != publicURL+"/approvals/"+eventID || open.Style != "primary" {
		t.Fatalf("the link to sign: %+v", open)
	}
	if !slices.ContainsFunc(m.Texts(), func(s string) bool { return strings.Contains(s, notifier.PasskeyNote) }) {
		t.Fatalf("the message does not say why it has no Approve: %q", m.Texts())
	}

	// Without a public URL there is nothing to link: still no Approve.
	msg := slack.RequestMessage(ptr(toolRequest(t, stepUp)), nil, slack.RenderOptions{})
	raw, err := json.Marshal(msg.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), slack.ActionApprove) || strings.Contains(string(raw), slack.ActionEdit) {
		t.Fatalf("a step-up message without a public URL offers to approve: %s", raw)
	}

	// The same request without step-up keeps its buttons.
	fake = newFake(t)
	m = notify(t, fake, newChannel(t, fake), toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond}
	}))
	if got := actionIDs(m); !slices.Contains(got, slack.ActionApprove) || !slices.Contains(got, slack.ActionEdit) || !slices.Contains(got, slack.ActionApproveRun) {
		t.Fatalf("buttons without step-up: %v", got)
	}
}
