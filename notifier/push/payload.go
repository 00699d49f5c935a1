package push

import (
	"crypto/sha256"
	"encoding/json"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Message is the JSON a push carries, decrypted by the browser and shown
// by the inbox's service worker. It holds no argument value: the tool, the
// summary (with sensitive values masked), the risk, who asks and the
// deadline, and what the notification offers.
type Message struct {
	// V is the version of this shape (1).
	V    int    `json:"v"`
	Kind string `json:"kind"`
	// ID is the notification's idempotency key: a redelivered message
	// carries the same, so the service worker shows it once.
	ID string `json:"id"`
	// EventID names the approval ("" for a KindHeld message, which names none).
	EventID string `json:"event_id,omitempty"`
	// Tag is the same for every message of one approval, so a later one
	// (a reminder, the outcome) replaces the earlier on the device.
	Tag   string `json:"tag"`
	Title string `json:"title"`
	Body  string `json:"body"`
	// URL opens the approval's inbox page (or the inbox).
	URL         string    `json:"url"`
	Tool        string    `json:"tool,omitempty"`
	Summary     string    `json:"summary,omitempty"`
	Risk        string    `json:"risk,omitempty"`
	Agent       string    `json:"agent,omitempty"`
	RequestedBy string    `json:"requested_by,omitempty"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	// Sensitive says that values are masked, for a request with sensitive
	// values.
	Sensitive string `json:"sensitive,omitempty"`
	// Outcome says how the request was decided (kind decided).
	Outcome string `json:"outcome,omitempty"`
	// Actions are the buttons: approve and reject with their tokens where a
	// one-tap decision is allowed, else open.
	Actions []MessageAction `json:"actions"`
	// ActionURL is where the service worker posts an action's token
	// ({"token": …}) to vote: POST /v1/push/actions.
	ActionURL string `json:"action_url,omitempty"`
}

// MessageAction is one button of a notification.
type MessageAction struct {
	Action string `json:"action"`
	Title  string `json:"title"`
	// Token is the signed action (approve, reject); open has none.
	Token string `json:"token,omitempty"`
}

// Actions of a Message.
const (
	ActionApprove = "approve"
	ActionReject  = "reject"
	ActionOpen    = "open"
)

// maxSummary bounds the summary in a message; the whole message must fit
// MaxPayload with two action tokens.
const maxSummary = 600

// tag is the notification tag of an approval: the same for its request,
// reminders and outcome.
func tag(eventID string) string {
	sum := sha256.Sum256([]byte(eventID))
	return "cs-" + b64(sum[:12])
}

// topic is the RFC 8030 Topic of an approval's messages (at most 32
// characters of the URL-safe base64 alphabet): a push service keeps only
// the newest undelivered message of a topic.
func topic(eventID string) string {
	sum := sha256.Sum256([]byte("topic\n" + eventID))
	return b64(sum[:24])
}

// message renders n (already Redacted) for its person, without actions.
func message(n notifier.Notification, publicURL string) Message {
	req := &n.Request
	m := Message{V: 1, Kind: kindOf(n.Kind), ID: n.IdempotencyKey(), EventID: req.EventID, Tag: tag(req.EventID), Title: notifier.Title(req),
		URL: notifier.ApprovalURL(publicURL, req.EventID), Summary: notifier.Truncate(req.Summary, maxSummary), Risk: req.Risk,
		Agent: req.Run.Agent, RequestedBy: req.Run.RequestedBy, ExpiresAt: req.ExpiresAt, Sensitive: notifier.SensitiveNote(req)}
	if req.ToolCall != nil {
		m.Tool = req.ToolCall.Name
	}
	var body []string
	if m.Summary != "" {
		body = append(body, m.Summary)
	}
	who := req.Run.Agent
	if req.Run.RequestedBy != "" {
		who += " for " + req.Run.RequestedBy
	}
	body = append(body, riskWord(req.Risk)+" risk, asked by "+who+", due "+req.ExpiresAt.UTC().Format("15:04 UTC Jan 2"))
	switch {
	case n.Kind == notifier.KindDecided && n.Record != nil:
		m.Outcome = notifier.OutcomeLine(n.Record)
		m.Title = "Decided: " + strings.TrimPrefix(m.Title, "Approval needed: ")
		body = []string{m.Outcome}
	case strings.HasPrefix(n.Kind, "reminder."):
		m.Title = "Reminder: " + m.Title
	}
	m.Body = strings.Join(body, "\n")
	m.Actions = []MessageAction{{Action: ActionOpen, Title: "Open"}}
	return m
}

// heldMessage is what a person gets once the fan-out cap is reached: no
// request is named.
func heldMessage(n notifier.Notification, publicURL string) Message {
	return Message{V: 1, Kind: notifier.KindHeld, ID: n.IdempotencyKey(), Tag: "cs-held", Title: "More approvals are waiting",
		Body: notifier.HeldLine(n.HeldUntil), URL: notifier.InboxURL(publicURL),
		Actions: []MessageAction{{Action: ActionOpen, Title: "Open"}}}
}

// kindOf is the message kind: requested, reminder, escalation, decided, held.
func kindOf(kind string) string {
	k, _, _ := strings.Cut(kind, ".")
	return k
}

func (m Message) encode() ([]byte, error) { return json.Marshal(m) }

// riskWord is a risk tier with a capital: "High".
func riskWord(risk string) string {
	switch risk {
	case contracts.RiskLow:
		return "Low"
	case contracts.RiskMedium:
		return "Medium"
	case contracts.RiskHigh:
		return "High"
	case contracts.RiskCritical:
		return "Critical"
	}
	return "Unrated"
}
