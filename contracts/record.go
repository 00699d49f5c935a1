package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Record statuses. Every status but pending is terminal.
const (
	StatusPending   = "pending"
	StatusApproved  = "approved"
	StatusRejected  = "rejected"
	StatusResponded = "responded"
	StatusAnswered  = "answered"
	StatusExpired   = "expired"
	StatusCancelled = "cancelled"
)

// Refusal reason codes, recorded on refused votes and commands and returned by the API.
const (
	ReasonNotAnApprover      = "not_an_approver"
	ReasonSelfApproval       = "self_approval"
	ReasonDuplicateVote      = "duplicate_vote"
	ReasonClosed             = "closed"
	ReasonStaleArguments     = "stale_arguments"
	ReasonInvalidArguments   = "invalid_arguments"
	ReasonDecisionNotAllowed = "decision_not_allowed"
	ReasonUnknownEvent       = "unknown_event"
	ReasonMalformed          = "malformed"
	ReasonAlreadyClaimed     = "already_claimed"
	ReasonNotApproved        = "not_approved"
	// ReasonOutOfOrder refuses an approval in an ordered chain (quorum
	// order "sequence") from an approver whose turn has not come.
	ReasonOutOfOrder = "out_of_order"
	// ReasonWrongTenant refuses a vote from an approver limited to other
	// tenants than the request's, even when the policy names them.
	ReasonWrongTenant = "wrong_tenant"
	// ReasonTooLarge refuses what does not fit the size budget (Limits): a
	// vote bigger than its limits, or one whose record would outgrow the
	// server's max payload.
	ReasonTooLarge = "too_large"
	// ReasonUnknownApprover refuses a vote or command from someone the live
	// directory does not list (never listed, or removed): a surface vouches
	// for who someone is, the directory for what they may do.
	ReasonUnknownApprover = "unknown_approver"
	// ReasonNotPermitted refuses a command from an issuer who may not give
	// it: extend (admins and the request's approvers), cancel (also its
	// requester and submitting agent), claim (the submitting agent, or an
	// admin).
	ReasonNotPermitted = "not_permitted"
	// ReasonDeadlineNotLater refuses an extend that would not move the
	// deadline later.
	ReasonDeadlineNotLater = "deadline_not_later"
	// ReasonApprovalLapsed refuses a claim made more than the request's
	// claim_within after its approval: the call needs a new decision.
	ReasonApprovalLapsed = "approval_lapsed"
	// ReasonStepUpRequired refuses an approval without a passkey
	// assertion on a request whose rule says step_up: passkey.
	ReasonStepUpRequired = "step_up_required"
	// ReasonPasskeyUnknown refuses an assertion by a credential that is not
	// one of the voter's enrolled passkeys, or was revoked.
	ReasonPasskeyUnknown = "passkey_unknown"
	// ReasonPasskeyMismatch refuses an assertion over a statement that is
	// not this vote's: another request, approver, tool, arguments, decision
	// or edit.
	ReasonPasskeyMismatch = "passkey_mismatch"
	// ReasonPasskeyStale refuses an assertion whose statement was made too
	// long before the vote is counted (or in the future).
	ReasonPasskeyStale = "passkey_stale"
	// ReasonPasskeyInvalid refuses an assertion that does not verify: the
	// signature, the client data (type, challenge, origin) or the
	// authenticator data (RP ID, user presence and verification).
	ReasonPasskeyInvalid = "passkey_invalid"
	// ReasonNotClaimed refuses an outcome for an approval nobody claimed.
	ReasonNotClaimed = "not_claimed"
	// ReasonOutcomeReported refuses a second, different outcome report.
	ReasonOutcomeReported = "outcome_reported"
)

// DefaultClaimWithin is how long an approval may be claimed after it was
// decided when its rule does not say (claim_within).
const DefaultClaimWithin = 15 * time.Minute

// MaxRefusedVotes is how many refused votes a record keeps; older ones are
// only counted.
const MaxRefusedVotes = 100

// DecidedByTimeout is the decided_by entry of an outcome that time decided.
const DecidedByTimeout = "timeout"

// DecidedByCountersign is the decided_by entry of an outcome the arbiter
// decided on its own: a request it refused because the policy version the
// request names does not give it (see RequestRefused).
const DecidedByCountersign = "countersign"

// ReasonRequestRefused opens the outcome reason of a refused request,
// "request_refused:<refusal>", and is the code a review or question returns
// for it. A refused request is recorded as rejected, so it never runs.
const ReasonRequestRefused = "request_refused"

// Refusals of a request: why the arbiter refused to open it.
const (
	// RefusalUnknownPolicyVersion: the policy version the request names was
	// never applied (nor is it built in or configured), so nothing vouches
	// for the snapshot.
	RefusalUnknownPolicyVersion = "unknown_policy_version"
	// RefusalNotGated: the named version allows or denies this call
	// outright; no approval request should exist for it.
	RefusalNotGated = "not_gated"
	// RefusalRuleMismatch: the named version decides this call by another
	// rule than the request says.
	RefusalRuleMismatch = "rule_mismatch"
	// RefusalWeakerThanPolicy: the snapshot asks for less than the rule
	// gives (fewer approvals, other approvers, no veto, self-approval,
	// approval on timeout, a later or earlier deadline, ...).
	RefusalWeakerThanPolicy = "weaker_than_policy"
)

// RequestRefusal reports whether o is the outcome of a refused request, and
// the refusal ("weaker_than_policy", ...).
func RequestRefusal(o *Outcome) (refusal string, ok bool) {
	if o == nil || len(o.DecidedBy) != 1 || o.DecidedBy[0] != DecidedByCountersign {
		return "", false
	}
	return strings.CutPrefix(o.Reason, ReasonRequestRefused+":")
}

// RefusedVote is a vote the arbiter did not count, with the reason.
type RefusedVote struct {
	VoteID   string   `json:"vote_id"`
	Approver Approver `json:"approver"`
	Decision string   `json:"decision,omitempty"`
	Reason   string   `json:"reason"`
	// Detail says more for people, e.g. where an edit fails the tool's
	// schema: "arguments/amount: maximum: got 5000, want 1000".
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// Outcome is the terminal decision of a record.
type Outcome struct {
	Decision        string          `json:"decision"`
	Arguments       json.RawMessage `json:"arguments,omitempty"`
	ArgumentsSHA256 string          `json:"arguments_sha256,omitempty"`
	Diff            json.RawMessage `json:"diff,omitempty"`
	Comment         string          `json:"comment,omitempty"`
	// Action is a human_input answer's action: accept, decline or cancel
	// (MCP elicitation). Arguments then holds the accepted content.
	Action    string    `json:"action,omitempty"`
	DecidedBy []string  `json:"decided_by"`
	DecidedAt time.Time `json:"decided_at"`
	Reason    string    `json:"reason,omitempty"`
}

// Claim marks an approval as used: the tool is about to run, once.
type Claim struct {
	ClaimID string    `json:"claim_id"`
	At      time.Time `json:"at"`
	// ReceiptID is the id (jti) of the receipt the arbiter issues for this
	// claim, written in the same record write as the claim; the receipt
	// itself is a bearer token and is stored apart, in the hitl_receipts
	// bucket (IssuedReceipt). Empty when the arbiter signs no receipts.
	ReceiptID string `json:"receipt_id,omitempty"`
	// Receipt is the signed receipt (a compact JWS; see contracts/receipt).
	// The stored record never holds it: the API fills it in for the
	// claimant alone, in the claim's answer and its reads of the record.
	Receipt string `json:"receipt,omitempty"`
	// By is who claimed: the only one who may report the outcome.
	By string `json:"by,omitempty"`
}

// Execution is how a claimed call ended, as its claimant reported it once
// (CommandOutcome). A record claimed without one is "claimed, no outcome":
// the runner died, or never reports.
type Execution struct {
	Status       string    `json:"status"`
	Summary      string    `json:"summary,omitempty"`
	ResultSHA256 string    `json:"result_sha256,omitempty"`
	ReportedBy   string    `json:"reported_by"`
	ReportedAt   time.Time `json:"reported_at"`
	// CommandID is the report's command id: a retried report is one.
	CommandID string `json:"command_id"`
}

// Record is the value under <event_id> in the hitl_approvals bucket. Only the
// arbiter writes it. The KV revision is not part of the value.
type Record struct {
	Spec                string            `json:"spec"`
	Request             ApprovalRequested `json:"request"`
	Status              string            `json:"status"`
	ExpiresAt           time.Time         `json:"expires_at"`
	EscalationLevel     int               `json:"escalation_level"`
	Votes               []Vote            `json:"votes"`
	RefusedVotes        []RefusedVote     `json:"refused_votes"`
	RefusedVotesOmitted int               `json:"refused_votes_omitted,omitempty"`
	Outcome             *Outcome          `json:"outcome,omitempty"`
	// Sensitive lists, as RFC 6901 JSON pointers, the argument values
	// shown masked to those who may not see them, over every arguments
	// value the record carries: the request's (Request.Sensitive), the
	// edits' and the outcome's. The arbiter adds the pointers of each edit
	// it counts, computed with the request's policy decision; the pointer
	// "" masks every arguments value whole (an edit whose pointers could
	// not be computed). Absent while only the request's are known.
	Sensitive []string `json:"sensitive,omitempty"`
	Claim     *Claim   `json:"claim,omitempty"`
	// Execution is the claimant's report of how the call ended.
	Execution *Execution `json:"execution,omitempty"`
	// Review is the automated first reviewer of the request and its
	// opinion, when the rule names one (see Review).
	Review *Review `json:"review,omitempty"`
	// LapsedAt is when a claim found the approval lapsed (see
	// ReasonApprovalLapsed); the approval can no longer be claimed.
	LapsedAt  *time.Time `json:"lapsed_at,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// Terminal reports whether the record has reached its outcome.
func (r *Record) Terminal() bool { return r.Status != StatusPending }

// Terminal reports whether status is a final status.
func Terminal(status string) bool { return status != StatusPending && status != "" }

// Decided is published on hitl.approval.decided.<event_id> once, when a
// record turns terminal.
type Decided struct {
	Spec      string    `json:"spec"`
	EventID   string    `json:"event_id"`
	Status    string    `json:"status"`
	Agent     string    `json:"agent"`
	RunID     string    `json:"run_id,omitempty"`
	ToolName  string    `json:"tool_name,omitempty"`
	Outcome   *Outcome  `json:"outcome,omitempty"`
	Revision  uint64    `json:"revision"`
	DecidedAt time.Time `json:"decided_at"`
}

// Change kinds of a Changed event.
const (
	ChangeCreated      = "created"
	ChangeVoteCounted  = "vote_counted"
	ChangeVoteRefused  = "vote_refused"
	ChangeClaimed      = "claimed"
	ChangeClaimRefused = "claim_refused"
	ChangeExtended     = "extended"
	ChangeDecided      = "decided"
	// A refused cancel or extend command changes nothing in the record but
	// is announced, like a refused vote or claim.
	ChangeCancelRefused = "cancel_refused"
	ChangeExtendRefused = "extend_refused"
	// ChangeReminded announces that reminder Step of a pending request is
	// due: the notifier re-notifies the approvers who have not voted.
	ChangeReminded = "reminded"
	// ChangeEscalated announces that the request reached escalation level
	// Step: that tier's approvers may now decide and are told.
	ChangeEscalated = "escalated"
	// ChangeNotifyDue announces that stage Step (from 1) of a staggered
	// notification (ApprovalRequested.Notify) of a pending request is due:
	// the notifier tells that stage's route, except those who opened it.
	ChangeNotifyDue = "notify_due"
	// ChangeOutcome announces the claimant's report of how the call ended;
	// ChangeOutcomeRefused a report that was refused.
	ChangeOutcome        = "outcome"
	ChangeOutcomeRefused = "outcome_refused"
)

// Changed is published on hitl.approval.changed.<event_id> for every change of
// a record that is not its terminal transition (votes counted or refused,
// claims, extensions). Together with the request and decided streams it forms
// an approval's timeline.
type Changed struct {
	Spec     string    `json:"spec"`
	EventID  string    `json:"event_id"`
	Change   string    `json:"change"`
	Status   string    `json:"status"`
	VoteID   string    `json:"vote_id,omitempty"`
	Approver *Approver `json:"approver,omitempty"`
	By       string    `json:"by,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Step is the reminder's number (reminded) or the escalation level
	// reached (escalated), from 1.
	Step     int       `json:"step,omitempty"`
	Revision uint64    `json:"revision"`
	At       time.Time `json:"at"`
}

// ErrNotThisRecord is a value stored under a record's key that is not
// that record: its spec is not SpecRecord, or its request names another
// event. Only the arbiter may publish on the bucket's subjects, but the
// server also publishes there what it answers to whoever names such a
// subject as the reply of a JetStream API request (an account info, a
// message get's envelope); such a value is no record, and every reader
// treats the key as unreadable.
var ErrNotThisRecord = errors.New("contracts: the value stored under this key is not its approval record")

// CheckRecordIdentity is the one rule by which a reader knows a value it
// read under key is the record of key, given the value's spec and its
// request's event id.
func CheckRecordIdentity(key, spec, eventID string) error {
	if spec != SpecRecord || eventID != key {
		return fmt.Errorf("%w (spec %q, event %q, key %q)", ErrNotThisRecord, truncated(spec), truncated(eventID), key)
	}
	return nil
}

// DecodeRecord decodes data, a value read under key in the approvals
// bucket, into rec, and checks that it is the record of key
// (CheckRecordIdentity).
func DecodeRecord(key string, data []byte, rec *Record) error {
	if err := Decode(data, rec); err != nil {
		return err
	}
	return CheckRecordIdentity(key, rec.Spec, rec.Request.EventID)
}

// truncated keeps an error message short whatever a value held.
func truncated(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
