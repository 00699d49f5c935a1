package contracts

import (
	"encoding/json"
	"time"
)

// Standing grants: an approver who approves a call may, within what the
// rule permits, approve more than the one call — the same tool for the
// rest of the run, or for the agent (and tenant) for a time, for exactly
// these arguments or for arguments a condition admits. The arbiter alone
// writes grants, in the hitl_grants bucket, when a decision that met the
// rule's quorum asked for one; gates read them. These are extensions of the
// contract.

// Specs of the grant messages.
const (
	SpecGrant      = "countersign.grant/v1"
	SpecGrantEvent = "countersign.grant.event/v1"
)

// BucketGrants holds standing grants, key <grant_id>. Only the arbiter writes it.
const BucketGrants = "hitl_grants"

// Grant subjects (stream HITL_EVENTS): the grant's timeline.
const (
	SubjectGrantPrefix        = "hitl.grant."
	SubjectGrantIssuedPrefix  = "hitl.grant.issued."
	SubjectGrantUsedPrefix    = "hitl.grant.used."
	SubjectGrantRevokedPrefix = "hitl.grant.revoked."
)

// GrantIssuedSubject, GrantUsedSubject and GrantRevokedSubject are where a
// grant's issue, each use and its revocation are recorded.
func GrantIssuedSubject(grantID string) string  { return SubjectGrantIssuedPrefix + grantID }
func GrantUsedSubject(grantID string) string    { return SubjectGrantUsedPrefix + grantID }
func GrantRevokedSubject(grantID string) string { return SubjectGrantRevokedPrefix + grantID }

// Grant scopes: how far beyond the approved call a grant reaches.
const (
	// GrantScopeCall is the approved call only: no grant (the default).
	GrantScopeCall = "call"
	// GrantScopeRun covers the same tool in the same run of the same
	// agent and tenant.
	GrantScopeRun = "run"
	// GrantScopeAgent covers the same tool for the same agent and tenant,
	// in any run.
	GrantScopeAgent = "agent"
)

// Grant argument modes: which arguments a grant covers.
const (
	// GrantArgumentsSame covers exactly the approved arguments (by their
	// RFC 8785 hash).
	GrantArgumentsSame = "same"
	// GrantArgumentsCondition covers arguments a CEL condition admits. A
	// rule that permits conditions permits same too.
	GrantArgumentsCondition = "condition"
)

// CommandRevokeGrant revokes the grant an approval issued: a command on
// hitl.approval.command.<event_id>, where event_id is the grant's id.
const CommandRevokeGrant = "revoke_grant"

// Refusal reasons of grants.
const (
	// ReasonGrantNotAllowed refuses a vote asking for a grant the request's
	// rule does not permit (a scope, lifetime or argument mode beyond its
	// grants setting, or a condition that does not compile).
	ReasonGrantNotAllowed = "grant_not_allowed"
	// ReasonUnknownGrant refuses a revocation of a grant that does not exist.
	ReasonUnknownGrant = "unknown_grant"
)

// Grant statuses. A grant is active until it expires or is revoked.
const (
	GrantActive  = "active"
	GrantExpired = "expired"
	GrantRevoked = "revoked"
)

// GrantLimits is a rule's grants setting, copied into the request snapshot
// (the request's `grants`) so the arbiter can hold a vote's grant to it
// without trusting the voter. The zero value permits no grant.
type GrantLimits struct {
	// Scopes the rule permits besides call: run, agent.
	Scopes []string `json:"scopes"`
	// MaxTTL is the longest a grant may live (Go duration syntax).
	MaxTTL string `json:"max_ttl"`
	// Arguments is same (only the approved arguments) or condition
	// (arguments a condition admits, or the same ones).
	Arguments string `json:"arguments"`
}

// GrantRequest is what an approving vote asks to grant beyond the one call
// (the vote's `grant`).
type GrantRequest struct {
	Scope string `json:"scope"`
	// TTL is how long the grant lives from the decision (Go duration
	// syntax); at most the rule's max_ttl.
	TTL string `json:"ttl"`
	// Arguments is same or condition; Condition is the CEL condition over
	// args (and tool, agent, tenant, run) of a condition grant.
	Arguments string `json:"arguments"`
	Condition string `json:"condition,omitempty"`
}

// Grant is the value under <grant_id> in hitl_grants. A grant's id is the
// event id of the approval whose decision issued it.
type Grant struct {
	Spec    string `json:"spec"`
	GrantID string `json:"grant_id"`
	// Tenant, Agent and Tool bound every grant; RunID bounds a run grant.
	Tenant string `json:"tenant,omitempty"`
	Agent  string `json:"agent"`
	Tool   string `json:"tool"`
	RunID  string `json:"run_id,omitempty"`
	Scope  string `json:"scope"`
	// Arguments is same (ArgumentsSHA256 is what it covers) or condition.
	Arguments       string `json:"arguments"`
	ArgumentsSHA256 string `json:"arguments_sha256,omitempty"`
	Condition       string `json:"condition,omitempty"`
	// Policy is the rule and version that gated the issuing request; the
	// grant applies only while the policy in force decides the call by the
	// same rule, and that rule still permits the grant (Limits are what it
	// permitted when the grant was issued).
	Policy    PolicyRef   `json:"policy"`
	Limits    GrantLimits `json:"limits"`
	GrantedBy []string    `json:"granted_by"`
	GrantedAt time.Time   `json:"granted_at"`
	ExpiresAt time.Time   `json:"expires_at"`
	// Revoked is set once, by the revocation.
	Revoked *GrantRevocation `json:"revoked,omitempty"`
}

// GrantRevocation says who revoked a grant, and when.
type GrantRevocation struct {
	By        string    `json:"by"`
	At        time.Time `json:"at"`
	CommandID string    `json:"command_id"`
}

// Status is the grant's status at now.
func (g *Grant) Status(now time.Time) string {
	switch {
	case g.Revoked != nil:
		return GrantRevoked
	case !now.Before(g.ExpiresAt):
		return GrantExpired
	}
	return GrantActive
}

// Kinds of grant events.
const (
	GrantEventIssued  = "issued"
	GrantEventUsed    = "used"
	GrantEventRevoked = "revoked"
)

// GrantEvent is published on hitl.grant.<event>.<grant_id>: the grant's
// timeline (issued by the arbiter, used by a gate, revoked by the arbiter).
type GrantEvent struct {
	Spec    string `json:"spec"`
	GrantID string `json:"grant_id"`
	Event   string `json:"event"`
	// By: the deciders (issued), the agent (used), the revoker (revoked).
	By []string `json:"by"`
	// The call a use allowed: run, tool call and its arguments' hash.
	RunID           string          `json:"run_id,omitempty"`
	ToolCallID      string          `json:"tool_call_id,omitempty"`
	Tool            string          `json:"tool,omitempty"`
	ArgumentsSHA256 string          `json:"arguments_sha256,omitempty"`
	Grant           json.RawMessage `json:"grant,omitempty"`
	At              time.Time       `json:"at"`
}
