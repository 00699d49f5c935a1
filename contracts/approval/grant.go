package approval

import (
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/contracts"
)

// This file is the pure core of standing grants: whether a vote may ask
// for a grant, which grant a decided record issues, revocation, and
// whether a grant covers a call. No I/O; time comes in as an argument.

// MaxGrantCondition bounds a grant condition, in bytes.
const MaxGrantCondition = 2048

// GrantLimitsValid reports why l is not a sound grants setting, or "".
func GrantLimitsValid(l *contracts.GrantLimits) string {
	if l == nil {
		return ""
	}
	for _, s := range l.Scopes {
		if s != contracts.GrantScopeCall && s != contracts.GrantScopeRun && s != contracts.GrantScopeAgent {
			return "grants.scopes: unknown scope " + s + " (call, run, agent)"
		}
	}
	if d, err := time.ParseDuration(l.MaxTTL); err != nil || d <= 0 {
		return "grants.max_ttl: must be a positive duration"
	}
	if l.Arguments != "" && l.Arguments != contracts.GrantArgumentsSame && l.Arguments != contracts.GrantArgumentsCondition {
		return "grants.arguments: must be same or condition"
	}
	return ""
}

// CheckGrantRequest says why the request's rule does not permit the grant
// g ("" when it does). A scope of call asks for nothing beyond the call and
// is always permitted.
func CheckGrantRequest(req *contracts.ApprovalRequested, g *contracts.GrantRequest) string {
	if g == nil || g.Scope == contracts.GrantScopeCall && g.TTL == "" && g.Arguments == "" && g.Condition == "" {
		return ""
	}
	if req.Kind != contracts.KindToolApproval || req.ToolCall == nil {
		return "grant: only a tool call's approval can grant"
	}
	l := req.Grants
	if l == nil || len(l.Scopes) == 0 {
		return "grant: this request's rule permits no grant, only the call"
	}
	if why := GrantLimitsValid(l); why != "" {
		return "grant: the request's " + why
	}
	switch g.Scope {
	case contracts.GrantScopeRun:
		if req.Run.ID == "" {
			return "grant/scope: a run grant needs a run id, and this request has none"
		}
	case contracts.GrantScopeAgent:
	default:
		return "grant/scope: must be run or agent (call grants nothing more)"
	}
	if !slices.Contains(l.Scopes, g.Scope) {
		return "grant/scope: the rule permits " + scopeList(l.Scopes) + ", not " + g.Scope
	}
	ttl, err := time.ParseDuration(g.TTL)
	if err != nil || ttl <= 0 {
		return "grant/ttl: must be a positive duration such as 2h"
	}
	if max, _ := time.ParseDuration(l.MaxTTL); ttl > max {
		return "grant/ttl: " + ttl.String() + " is longer than the rule's max_ttl " + max.String()
	}
	switch g.Arguments {
	case contracts.GrantArgumentsSame:
		if g.Condition != "" {
			return "grant/condition: a grant for the same arguments has no condition"
		}
	case contracts.GrantArgumentsCondition:
		if l.Arguments != contracts.GrantArgumentsCondition {
			return "grant/arguments: the rule permits grants for the same arguments only"
		}
		if g.Condition == "" {
			return "grant/condition: a condition grant needs a condition"
		}
		if len(g.Condition) > MaxGrantCondition || !utf8.ValidString(g.Condition) {
			return "grant/condition: must be UTF-8 text of at most 2048 bytes"
		}
	default:
		return "grant/arguments: must be same or condition"
	}
	return ""
}

func scopeList(s []string) string {
	var out []string
	for _, x := range s {
		if x != contracts.GrantScopeCall {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return "no grant"
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// asksGrant reports whether g asks for more than the call.
func asksGrant(g *contracts.GrantRequest) bool {
	return g != nil && g.Scope != "" && g.Scope != contracts.GrantScopeCall
}

// IssueGrant is the grant a record that was just approved issues, if any.
// A grant is issued only by an approval that met the quorum: every
// approver the outcome names must have asked for the same grant, within
// the request's rule; time (on_timeout approve) and the arbiter never
// grant. The grant's id is the record's event id.
func IssueGrant(rec contracts.Record) (contracts.Grant, bool) {
	req := rec.Request
	out := rec.Outcome
	if rec.Status != contracts.StatusApproved || out == nil || len(out.DecidedBy) == 0 ||
		req.Kind != contracts.KindToolApproval || req.ToolCall == nil || req.Grants == nil {
		return contracts.Grant{}, false
	}
	counting := approvalsFor(rec, out.ArgumentsSHA256)
	if len(counting) < max(1, req.Quorum.Required) || !sameSet(counting, out.DecidedBy) {
		return contracts.Grant{}, false
	}
	var asked *contracts.GrantRequest
	for _, id := range out.DecidedBy {
		v, ok := countingVote(rec, id, out.ArgumentsSHA256)
		if !ok || !asksGrant(v.Grant) || CheckGrantRequest(&req, v.Grant) != "" {
			return contracts.Grant{}, false
		}
		if asked == nil {
			asked = v.Grant
		} else if *asked != *v.Grant {
			return contracts.Grant{}, false
		}
	}
	ttl, _ := time.ParseDuration(asked.TTL)
	g := contracts.Grant{
		Spec: contracts.SpecGrant, GrantID: req.EventID,
		Tenant: req.Run.Tenant, Agent: req.Run.Agent, Tool: req.ToolCall.Name,
		Scope: asked.Scope, Arguments: asked.Arguments,
		Policy:    contracts.PolicyRef{Rule: req.Policy.Rule, Version: req.Policy.Version},
		Limits:    cloneLimits(*req.Grants),
		GrantedBy: slices.Clone(out.DecidedBy),
		GrantedAt: out.DecidedAt, ExpiresAt: out.DecidedAt.Add(ttl),
	}
	if g.Scope == contracts.GrantScopeRun {
		g.RunID = req.Run.ID
	}
	if g.Arguments == contracts.GrantArgumentsSame {
		g.ArgumentsSHA256 = out.ArgumentsSHA256
	} else {
		g.Condition = asked.Condition
	}
	return g, true
}

func cloneLimits(l contracts.GrantLimits) contracts.GrantLimits {
	l.Scopes = slices.Clone(l.Scopes)
	return l
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// countingVote is the approval (or edit) of id that counts for the
// arguments with hash sha.
func countingVote(rec contracts.Record, id, sha string) (contracts.Vote, bool) {
	base := ""
	if rec.Request.ToolCall != nil {
		base = rec.Request.ToolCall.ArgumentsSHA256
	}
	for _, v := range rec.Votes {
		if v.Approver.ID != id {
			continue
		}
		switch v.Decision {
		case contracts.DecisionEdit:
			if editedSHA(v) == sha {
				return v, true
			}
		case contracts.DecisionApprove:
			if argsUnderReviewAt(rec, v.VoteID, base) == sha {
				return v, true
			}
		}
	}
	return contracts.Vote{}, false
}

// GrantPermitted reports whether limits l permit grant g: its scope among
// l's, its lifetime within l's max_ttl, and its argument mode within l's.
// A nil l permits nothing.
func GrantPermitted(l *contracts.GrantLimits, g *contracts.Grant) bool {
	if l == nil || GrantLimitsValid(l) != "" || !slices.Contains(l.Scopes, g.Scope) {
		return false
	}
	if g.Scope != contracts.GrantScopeRun && g.Scope != contracts.GrantScopeAgent {
		return false
	}
	max, _ := time.ParseDuration(l.MaxTTL)
	if g.ExpiresAt.Sub(g.GrantedAt) > max || !g.ExpiresAt.After(g.GrantedAt) {
		return false
	}
	switch g.Arguments {
	case contracts.GrantArgumentsSame:
		return g.ArgumentsSHA256 != ""
	case contracts.GrantArgumentsCondition:
		return l.Arguments == contracts.GrantArgumentsCondition && g.Condition != ""
	}
	return false
}

// RevokeGrant applies a revoke_grant command to g at now. It is
// idempotent per command id; revoking a revoked grant is a duplicate.
func RevokeGrant(g contracts.Grant, cmd contracts.Command, now time.Time) (next contracts.Grant, changed bool) {
	if g.Revoked != nil {
		return g, false
	}
	g.Revoked = &contracts.GrantRevocation{By: cmd.By, At: now, CommandID: cmd.CommandID}
	return g, true
}

// GrantCall is a call a gate asks a grant about, with what the policy in
// force says of it now.
type GrantCall struct {
	Tenant, Agent, RunID, Tool string
	Arguments                  json.RawMessage
	ArgumentsSHA256            string
	// Rule is the rule the policy in force decides the call by, and
	// Limits that rule's grants setting now (nil: none).
	Rule   string
	Limits *contracts.GrantLimits
}

// Why a grant does not cover a call.
const (
	NotCoveredRevoked   = "revoked"
	NotCoveredExpired   = "expired"
	NotCoveredOther     = "another call"
	NotCoveredRule      = "rule changed"
	NotCoveredPolicy    = "no longer permitted"
	NotCoveredArguments = "other arguments"
	NotCoveredCondition = "condition not met"
)

// GrantCovers reports whether g lets call run without a new request at
// now, and if not, why. match evaluates a condition grant's condition for
// the call (an error never covers). A grant covers only while it is not
// revoked and not expired, for the same tenant, agent and tool (and run,
// for a run grant), while the policy in force decides the call by the
// grant's rule and that rule, now as when it was issued, permits the grant.
func GrantCovers(g *contracts.Grant, call GrantCall, now time.Time, match func(cond string) (bool, error)) (bool, string) {
	switch {
	case g.Revoked != nil:
		return false, NotCoveredRevoked
	case !now.Before(g.ExpiresAt):
		return false, NotCoveredExpired
	case g.Tenant != call.Tenant || g.Agent != call.Agent || g.Tool != call.Tool:
		return false, NotCoveredOther
	case g.Scope == contracts.GrantScopeRun && (g.RunID == "" || g.RunID != call.RunID):
		return false, NotCoveredOther
	case g.Policy.Rule != call.Rule:
		return false, NotCoveredRule
	case !GrantPermitted(&g.Limits, g) || !GrantPermitted(call.Limits, g):
		return false, NotCoveredPolicy
	}
	switch g.Arguments {
	case contracts.GrantArgumentsSame:
		if call.ArgumentsSHA256 == "" || call.ArgumentsSHA256 != g.ArgumentsSHA256 {
			return false, NotCoveredArguments
		}
		return true, ""
	case contracts.GrantArgumentsCondition:
		if match == nil {
			return false, NotCoveredCondition
		}
		ok, err := match(g.Condition)
		if err != nil || !ok {
			return false, NotCoveredCondition
		}
		return true, ""
	}
	return false, NotCoveredPolicy
}
