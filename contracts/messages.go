package contracts

import (
	"encoding/json"
	"time"
)

// Spec strings name a message's kind and major version. A reader accepts
// unknown fields; an incompatible change gets a new spec.
const (
	SpecApprovalRequested   = "countersign.approval.requested/v1"
	SpecHumanInputRequested = "countersign.human_input.requested/v1"
	SpecVote                = "countersign.approval.resolved/v1"
	SpecRead                = "countersign.approval.read/v1"
	SpecCommand             = "countersign.approval.command/v1"
	SpecDecided             = "countersign.approval.decided/v1"
	SpecChanged             = "countersign.approval.changed/v1"
	SpecNotifyReceipt       = "countersign.notify.receipt/v1"
	SpecRecord              = "countersign.approval/v1"
)

// Kind of request.
const (
	KindToolApproval = "tool_approval"
	KindHumanInput   = "human_input"
)

// Risk tiers.
const (
	RiskLow      = "low"
	RiskMedium   = "medium"
	RiskHigh     = "high"
	RiskCritical = "critical"
)

// Decisions a vote can carry.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
	DecisionEdit    = "edit"
	DecisionRespond = "respond"
	DecisionAnswer  = "answer"
)

// Channels a vote can arrive through.
const (
	ViaWeb   = "web"
	ViaSlack = "slack"
	ViaEmail = "email"
	ViaCLI   = "cli"
	ViaAPI   = "api"
	ViaNATS  = "nats"
	// ViaPush is a one-tap action of a Web Push notification on a phone
	// (see notifier/push).
	ViaPush = "push"
)

// Commands on an approval.
const (
	CommandCancel = "cancel"
	CommandExtend = "extend"
	CommandClaim  = "claim"
	// CommandOutcome reports, after a claim, how the call ended: only the
	// claimant may, once (Command.Status, Summary, ResultSHA256).
	CommandOutcome = "outcome"
)

// Outcome statuses of a claimed call (CommandOutcome).
const (
	ExecutionSucceeded = "succeeded"
	ExecutionFailed    = "failed"
)

// MaxExecutionSummaryBytes bounds an outcome's summary.
const MaxExecutionSummaryBytes = 1024

// Actions of a human_input answer (MCP elicitation).
const (
	AnswerAccept  = "accept"
	AnswerDecline = "decline"
	AnswerCancel  = "cancel"
)

// What happens when a request expires undecided.
const (
	OnTimeoutReject  = "reject"
	OnTimeoutApprove = "approve"
)

// Quorum orders.
const (
	OrderAny      = "any"
	OrderSequence = "sequence"
)

// Run identifies the agent run a request belongs to.
type Run struct {
	ID          string `json:"id,omitempty"`
	ThreadID    string `json:"thread_id,omitempty"`
	Agent       string `json:"agent"`
	RequestedBy string `json:"requested_by,omitempty"`
	Owner       string `json:"owner,omitempty"`
	Tenant      string `json:"tenant,omitempty"`
	// Labels are free-form attributes of the run (env, team, ...) that
	// policy rules match on. An extension of the contract's run object.
	Labels map[string]string `json:"labels,omitempty"`
}

// ToolCall is one call an agent proposes. Arguments is a JSON object;
// ArgumentsSHA256 is its RFC 8785 hash (see ArgumentsSHA256).
type ToolCall struct {
	ID              string          `json:"id,omitempty"`
	Name            string          `json:"name"`
	Arguments       json.RawMessage `json:"arguments"`
	ArgumentsSHA256 string          `json:"arguments_sha256"`
}

// Question is what a human_input request asks, with an optional JSON Schema
// for the answer.
type Question struct {
	Text   string          `json:"text"`
	Schema json.RawMessage `json:"schema,omitempty"`
}

// PolicyRef records which policy rule and version decided a call, and a
// condition error if one made the call gated.
type PolicyRef struct {
	Rule    string `json:"rule"`
	Version string `json:"version"`
	Error   string `json:"error,omitempty"`
}

// Quorum says how many distinct approvers must approve and who they may be.
// Approvers are resolved user ids; an empty list means any authenticated
// approver. Veto (one rejection decides) is true unless a rule turns it off.
type Quorum struct {
	Required          int      `json:"required"`
	Approvers         []string `json:"approvers"`
	Veto              bool     `json:"veto"`
	AllowSelfApproval bool     `json:"allow_self_approval"`
	Order             string   `json:"order"`
}

// EscalationTier adds approvers and channels After a delay (Go duration syntax).
type EscalationTier struct {
	After     string   `json:"after"`
	Approvers []string `json:"approvers"`
	Channels  []string `json:"channels,omitempty"`
}

// ApprovalRequested is published on hitl.tool.approval.requested.<agent> (and,
// with kind human_input, on hitl.human.input.requested.<agent>). It is the
// snapshot the arbiter works from for the request's whole life.
type ApprovalRequested struct {
	Spec             string           `json:"spec"`
	EventID          string           `json:"event_id"`
	Kind             string           `json:"kind"`
	Run              Run              `json:"run"`
	ToolCall         *ToolCall        `json:"tool_call,omitempty"`
	ToolSchema       json.RawMessage  `json:"tool_schema,omitempty"`
	Question         *Question        `json:"question,omitempty"`
	Risk             string           `json:"risk"`
	Summary          string           `json:"summary"`
	Policy           PolicyRef        `json:"policy"`
	Quorum           Quorum           `json:"quorum"`
	Escalation       []EscalationTier `json:"escalation"`
	Reminders        []string         `json:"reminders"`
	AllowedDecisions []string         `json:"allowed_decisions"`
	Channels         []string         `json:"channels"`
	ExpiresAt        time.Time        `json:"expires_at"`
	OnTimeout        string           `json:"on_timeout"`
	CreatedAt        time.Time        `json:"created_at"`
	// Traceparent is the W3C trace context of the review that asked (an
	// extension of the contract): the outcome is announced in the same
	// trace, so one trace runs from review to resume.
	Traceparent string `json:"traceparent,omitempty"`
	// Submitter is who submitted the request through the HTTP API: the
	// subject of the agent's token (an extension of the contract; empty for
	// a request a library gate published). That token may read the request.
	Submitter string `json:"submitter,omitempty"`
	// Shadow is what the policy's shadow rules would have decided for the
	// call (an extension of the contract; see ShadowVerdict). A report
	// only: the arbiter checks and trusts none of it.
	Shadow []ShadowVerdict `json:"shadow,omitempty"`
	// History are the figures the policy's history conditions read for
	// the call (an extension of the contract; see HistoryFigure): the
	// arbiter decides the request with the same figures.
	History []HistoryFigure `json:"history,omitempty"`
	// ClaimWithin is how long after its decision the approval may be
	// claimed (a Go duration; empty: DefaultClaimWithin). An approval not
	// claimed by then lapses (ReasonApprovalLapsed).
	ClaimWithin string `json:"claim_within,omitempty"`
	// Sensitive lists, as RFC 6901 JSON pointers into the tool call's
	// arguments, every value shown masked outside Countersign (see
	// approval.Redact): those the deciding rule's `sensitive` names and
	// those the tool schema marks. The arguments and their hash stay the
	// real ones.
	Sensitive []string `json:"sensitive,omitempty"`
	// Grants are the standing grants the deciding rule permits (an
	// extension of the contract; absent: none, only the call).
	Grants *GrantLimits `json:"grants,omitempty"`
	// StepUp is what an approval must carry beyond the approver's identity
	// (an extension of the contract): StepUpPasskey, or empty for nothing.
	StepUp string `json:"step_up,omitempty"`
	// Notify is the rule's ordered notification (an extension of the
	// contract): each stage's route is notified After the request was
	// created, if it is still pending and the person has not opened it.
	// Channels, when set too, are notified at once.
	Notify []NotifyStage `json:"notify,omitempty"`
}

// NotifyStage is one stage of a staggered notification: a route (as in
// Channels, see ParseRoute) and how long after the request it is told (a
// Go duration; empty or "0s": at once).
type NotifyStage struct {
	Channel string `json:"channel"`
	After   string `json:"after,omitempty"`
}

// Delay is the stage's After as a duration (0 when empty or invalid).
func (s NotifyStage) Delay() time.Duration {
	d, err := time.ParseDuration(s.After)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// Read records on hitl.approval.read.<event_id> that someone read an
// approval whose arguments have sensitive values, or exported its audit
// trail (an extension of the contract, shown in the approval's timeline).
type Read struct {
	Spec    string `json:"spec"`
	EventID string `json:"event_id"`
	// Reader is the subject of the token or inbox session that read.
	Reader string `json:"reader"`
	// Surface is where: api, inbox or cli.
	Surface string `json:"surface"`
	// What was read: ReadRecord (the request) or ReadExport (its timeline).
	What string    `json:"what"`
	At   time.Time `json:"at"`
}

// What a Read records.
const (
	ReadRecord = "record"
	ReadExport = "export"
	// ReadOpened records that a person opened the approval (its inbox page,
	// or a push notification's action): a staggered notification does not
	// chase them on the later channels.
	ReadOpened = "opened"
)

// Approver is the verified identity behind a vote and the channel it came through.
type Approver struct {
	ID  string `json:"id"`
	Via string `json:"via"`
}

// Answer is a human_input reply, MCP elicitation style.
type Answer struct {
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content,omitempty"`
}

// Vote is published on hitl.approval.resolved.<event_id> by a resolver.
type Vote struct {
	Spec            string          `json:"spec"`
	VoteID          string          `json:"vote_id"`
	EventID         string          `json:"event_id"`
	Decision        string          `json:"decision"`
	Approver        Approver        `json:"approver"`
	Comment         string          `json:"comment,omitempty"`
	Arguments       json.RawMessage `json:"arguments,omitempty"`
	ArgumentsSHA256 string          `json:"arguments_sha256,omitempty"`
	Answer          *Answer         `json:"answer,omitempty"`
	// ApproverTenants limits the approver to requests of these tenants, as
	// the resolver knows them (an extension of the contract; empty: no
	// limit). The arbiter refuses the vote on another tenant's request.
	ApproverTenants []string `json:"approver_tenants,omitempty"`
	// Grant asks, with an approval, to approve more than this call (an
	// extension of the contract; see GrantRequest).
	Grant *GrantRequest `json:"grant,omitempty"`
	// Passkey is the approver's WebAuthn assertion over this vote's
	// approval statement (an extension of the contract), required to
	// approve a request whose StepUp is StepUpPasskey.
	Passkey   *PasskeyAssertion `json:"passkey,omitempty"`
	DecidedAt time.Time         `json:"decided_at"`
}

// Command is published on hitl.approval.command.<event_id>.
type Command struct {
	Spec      string    `json:"spec"`
	CommandID string    `json:"command_id"`
	EventID   string    `json:"event_id"`
	Command   string    `json:"command"`
	By        string    `json:"by"`
	Until     time.Time `json:"until,omitzero"`
	ClaimID   string    `json:"claim_id,omitempty"`
	IssuedAt  time.Time `json:"issued_at,omitzero"`
	// Status, Summary and ResultSHA256 are an outcome's report: succeeded
	// or failed, a short text for people, and the lowercase hex SHA-256 of
	// the call's result (optional).
	Status       string `json:"status,omitempty"`
	Summary      string `json:"summary,omitempty"`
	ResultSHA256 string `json:"result_sha256,omitempty"`
}

// Receipt statuses.
const (
	ReceiptDelivered = "delivered"
	ReceiptFailed    = "failed"
)

// NotifyReceipt is published on hitl.notify.<channel>.<event_id> after each
// notification: delivered, or failed for good. It joins the approval's
// timeline and keeps a redelivered request from being posted twice.
type NotifyReceipt struct {
	Spec    string `json:"spec"`
	EventID string `json:"event_id"`
	Channel string `json:"channel"`
	// Kind is requested, reminder.<n>, escalation.<n> or decided.
	Kind string `json:"kind"`
	// Target is the channel's address: a Slack conversation or user id, an
	// email address, a webhook endpoint's name.
	Target   string `json:"target"`
	Approver string `json:"approver,omitempty"`
	// IdempotencyKey is the notification's de-duplication key.
	IdempotencyKey string `json:"idempotency_key"`
	Status         string `json:"status"`
	// Ref is the channel's id of what it delivered (a Slack message, an
	// email Message-ID, a webhook-id), used to update it later.
	Ref string `json:"ref,omitempty"`
	// Error says why delivery failed; Permanent says a retry cannot help.
	Error     string    `json:"error,omitempty"`
	Permanent bool      `json:"permanent,omitempty"`
	At        time.Time `json:"at"`
}
