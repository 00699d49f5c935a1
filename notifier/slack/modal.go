package slack

import (
	"encoding/json"
	"errors"

	slackgo "github.com/slack-go/slack"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// The input of every Countersign modal: its block id (where Slack shows a
// validation error) and action id.
const (
	InputBlockID  = "countersign_input"
	InputActionID = "countersign_input"
)

// Slack's limits for modals.
const (
	maxModalTitle        = 24
	maxPrivateMetadata   = 3000
	maxInputValue        = 3000
	maxViewErrorText     = 1000
	maxQuestionInModal   = 2000
	maxModalSchemaInline = 2500
)

// modalMeta is a modal's private_metadata: the approval, the hash of the
// arguments the approver saw, and the message the modal was opened from.
type modalMeta struct {
	EventID         string `json:"e"`
	ArgumentsSHA256 string `json:"h,omitempty"`
	// Version names the arguments instead of their hash when some of
	// their values are sensitive (see ButtonValue).
	Version     string `json:"a,omitempty"`
	Channel     string `json:"c,omitempty"`
	TS          string `json:"ts,omitempty"`
	ResponseURL string `json:"r,omitempty"`
	// TextAnswer says a question without a schema takes plain text.
	TextAnswer bool `json:"t,omitempty"`
}

// encode gives the private_metadata, dropping the response URL if it would
// not fit.
func (m modalMeta) encode() (string, error) {
	raw, err := json.Marshal(m)
	if err == nil && len(raw) > maxPrivateMetadata {
		m.ResponseURL = ""
		raw, err = json.Marshal(m)
	}
	if err != nil {
		return "", err
	}
	if len(raw) > maxPrivateMetadata {
		return "", errors.New("slack: modal metadata too long")
	}
	return string(raw), nil
}

func parseModalMeta(s string) (modalMeta, error) {
	var m modalMeta
	if err := contracts.Decode([]byte(s), &m); err != nil || m.EventID == "" {
		return modalMeta{}, errors.New("slack: modal metadata unreadable")
	}
	return m, nil
}

// editModal lets an approver change the arguments (formatted, at most
// maxInputValue bytes) and approve the call with them.
func editModal(req *contracts.ApprovalRequested, formatted, meta string) slackgo.ModalViewRequest {
	name := "the call"
	if req.ToolCall != nil {
		name = "*" + escapeCut(req.ToolCall.Name, 200) + "*"
	}
	intro := "Change the arguments of " + name + " and approve the call with them. " +
		"The arguments must stay a JSON object that fits the tool's schema."
	input := slackgo.NewPlainTextInputBlockElement(nil, InputActionID).
		WithMultiline(true).WithInitialValue(formatted)
	return modal(ActionEdit, "Edit and approve", "Approve", meta,
		slackgo.NewSectionBlock(mrkdwn(intro), nil, nil),
		slackgo.NewInputBlock(InputBlockID, plain("Arguments (JSON)"), nil, input))
}

// respondModal asks for the text returned to the agent instead of running
// the call.
func respondModal(req *contracts.ApprovalRequested, meta string) slackgo.ModalViewRequest {
	name := "the call"
	if req.ToolCall != nil {
		name = "*" + escapeCut(req.ToolCall.Name, 200) + "*"
	}
	intro := "Your response goes back to the agent as the result of " + name + ", which does not run."
	input := slackgo.NewPlainTextInputBlockElement(nil, InputActionID).
		WithMultiline(true).WithMaxLength(maxInputValue)
	return modal(ActionRespond, "Respond to the agent", "Send", meta,
		slackgo.NewSectionBlock(mrkdwn(intro), nil, nil),
		slackgo.NewInputBlock(InputBlockID, plain("Response"), nil, input))
}

// answerModal shows a question and asks for the answer: a JSON object, or,
// when the question has no schema, plain text (sent as {"text": ...}).
func answerModal(req *contracts.ApprovalRequested, meta string) slackgo.ModalViewRequest {
	blocks := []slackgo.Block{}
	if q := req.Question; q != nil {
		blocks = append(blocks, slackgo.NewSectionBlock(mrkdwn(codeText("*Question*", func(limit int) string {
			return notifier.Truncate(q.Text, min(limit, maxQuestionInModal))
		})), nil, nil))
		if len(q.Schema) > 0 {
			blocks = append(blocks, slackgo.NewSectionBlock(mrkdwn(codeText("*Expected answer* (JSON Schema)", func(limit int) string {
				return notifier.FormatJSON(q.Schema, min(limit, maxModalSchemaInline))
			})), nil, nil))
		}
	}
	label, hint := "Answer (JSON object)", "A JSON object that fits the expected answer."
	if !hasSchema(req) {
		label, hint = "Answer", "Plain text, or a JSON object."
	}
	input := slackgo.NewPlainTextInputBlockElement(nil, InputActionID).
		WithMultiline(true).WithMaxLength(maxInputValue)
	blocks = append(blocks, slackgo.NewInputBlock(InputBlockID, plain(label), plain(hint), input))
	return modal(ActionAnswer, "Answer the agent", "Send answer", meta, blocks...)
}

func hasSchema(req *contracts.ApprovalRequested) bool {
	return req.Question != nil && len(req.Question.Schema) > 0
}

func modal(callbackID, title, submit, meta string, blocks ...slackgo.Block) slackgo.ModalViewRequest {
	return slackgo.ModalViewRequest{
		Type:            slackgo.VTModal,
		Title:           plain(cutPlain(title, maxModalTitle)),
		Submit:          plain(cutPlain(submit, maxModalTitle)),
		Close:           plain("Cancel"),
		Blocks:          slackgo.Blocks{BlockSet: blocks},
		PrivateMetadata: meta,
		CallbackID:      callbackID,
	}
}
