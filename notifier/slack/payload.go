package slack

import (
	"errors"
	"net/url"

	"github.com/countersign/countersign/contracts"
)

// Interaction types handled.
const (
	typeBlockActions   = "block_actions"
	typeViewSubmission = "view_submission"
)

// payload is the part of an interaction payload Countersign reads. It is
// decoded on its own rather than as a whole slack-go InteractionCallback,
// so a message block or element Countersign never looks at cannot make a
// vote unreadable.
type payload struct {
	Type string `json:"type"`
	User struct {
		ID     string `json:"id"`
		TeamID string `json:"team_id"`
	} `json:"user"`
	Team struct {
		ID string `json:"id"`
	} `json:"team"`
	TriggerID   string `json:"trigger_id"`
	ResponseURL string `json:"response_url"`
	Container   struct {
		Type      string `json:"type"`
		MessageTS string `json:"message_ts"`
		ChannelID string `json:"channel_id"`
	} `json:"container"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	Message struct {
		TS string `json:"ts"`
	} `json:"message"`
	Actions []payloadAction `json:"actions"`
	View    struct {
		ID              string `json:"id"`
		CallbackID      string `json:"callback_id"`
		PrivateMetadata string `json:"private_metadata"`
		State           struct {
			Values map[string]map[string]struct {
				Type  string `json:"type"`
				Value string `json:"value"`
			} `json:"values"`
		} `json:"state"`
	} `json:"view"`
}

type payloadAction struct {
	ActionID string `json:"action_id"`
	BlockID  string `json:"block_id"`
	Type     string `json:"type"`
	Value    string `json:"value"`
	ActionTS string `json:"action_ts"`
}

var (
	errNoPayload  = errors.New("slack: no payload field")
	errBadPayload = errors.New("slack: the payload is not a JSON object of the expected shape")
)

// parsePayload reads the payload field of a form-encoded interaction body.
func parsePayload(body []byte) (*payload, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errBadPayload
	}
	raw := form.Get("payload")
	if raw == "" {
		return nil, errNoPayload
	}
	var p payload
	if err := contracts.Decode([]byte(raw), &p); err != nil { // a repeated key is refused too
		return nil, errBadPayload
	}
	return &p, nil
}

// channelTS is the conversation and ts of the message an interaction came from.
func (p *payload) channelTS() (channel, ts string) {
	channel, ts = p.Container.ChannelID, p.Container.MessageTS
	if channel == "" {
		channel = p.Channel.ID
	}
	if ts == "" {
		ts = p.Message.TS
	}
	return channel, ts
}

// countersignAction is the payload's first Countersign action, if any.
func (p *payload) countersignAction() (payloadAction, bool) {
	for _, a := range p.Actions {
		switch a.ActionID {
		case ActionApprove, ActionReject, ActionEdit, ActionRespond, ActionAnswer, ActionDecline, ActionApproveRun:
			return a, true
		}
	}
	return payloadAction{}, false
}

// input is the value typed in a modal's input.
func (p *payload) input() string {
	return p.View.State.Values[InputBlockID][InputActionID].Value
}
