package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// The history of reviewed calls, which policy conditions count and sum
// over (history.count, history.sum, history.approved).
const (
	// StreamHistory keeps one fact per reviewed call, appended by the gate
	// that reviewed it.
	StreamHistory = "HITL_HISTORY"
	// SubjectHistoryPrefix starts the subject of a fact:
	// hitl.history.<tenant>.<run>.<agent>, each token HistoryToken of the
	// name, so that each scope is one subject filter (HistoryFilter).
	SubjectHistoryPrefix = "hitl.history."
	// SpecHistoryFact is the spec of a HistoryFact.
	SpecHistoryFact = "countersign.history.fact/v1"
)

// Verdicts of a HistoryFact: what the policy decided for the call.
const (
	HistoryAllowed = "allowed"
	HistoryDenied  = "denied"
	HistoryGated   = "gated"
)

// Scopes of a history condition: the calls of the same agent (in the same
// tenant), of the same run (in the same tenant, any agent), or of the
// whole tenant.
const (
	HistoryScopeAgent  = "agent"
	HistoryScopeRun    = "run"
	HistoryScopeTenant = "tenant"
)

// HistoryFact is one reviewed call, as the history keeps it. It carries no
// argument values but the numeric ones the policy's history sums name.
type HistoryFact struct {
	Spec string `json:"spec"`
	// ID is the review's event id: a call reviewed again under the same id
	// is one fact.
	ID     string `json:"id"`
	Tool   string `json:"tool"`
	Agent  string `json:"agent"`
	Tenant string `json:"tenant,omitempty"`
	RunID  string `json:"run_id,omitempty"`
	// Verdict is HistoryAllowed, HistoryDenied or HistoryGated.
	Verdict string `json:"verdict"`
	// Fields are the argument fields the policy's sums named when the
	// fact was recorded; Values holds those of them the call had as
	// numbers.
	Fields []string           `json:"fields,omitempty"`
	Values map[string]float64 `json:"values,omitempty"`
	// At is when the gate reviewed the call (its clock).
	At time.Time `json:"at"`
}

// HistoryFigure is one figure a history condition read for a call: the
// gate's answer to history.<scope>.<func>(tools[, field], window). A gated
// call's request carries the figures its policy read (ApprovalRequested.
// History), so that the arbiter decides the request with the same ones.
type HistoryFigure struct {
	Scope  string `json:"scope"`
	Func   string `json:"func"`
	Tools  string `json:"tools"`
	Field  string `json:"field,omitempty"`
	Window string `json:"window"`
	// Value is the count, the sum, or for approved 1 (true) or 0.
	Value float64 `json:"value"`
}

// MaxHistoryFigures bounds the figures one request carries.
const MaxHistoryFigures = 64

// HistoryToken is the subject token of a tenant, run or agent name: the
// first 16 hex digits of its SHA-256 ("_" for the empty name), so that a
// name never appears in a subject and every name makes one token.
func HistoryToken(name string) string {
	if name == "" {
		return "_"
	}
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:8])
}

// HistorySubject is the subject of a fact of a call in tenant, run and
// agent.
func HistorySubject(tenant, run, agent string) string {
	return SubjectHistoryPrefix + HistoryToken(tenant) + "." + HistoryToken(run) + "." + HistoryToken(agent)
}

// HistoryFilter is the subject filter of the facts of one scope of a call:
// the tenant's, the run's within it, or the agent's within it.
func HistoryFilter(scope, tenant, run, agent string) string {
	t := SubjectHistoryPrefix + HistoryToken(tenant) + "."
	switch scope {
	case HistoryScopeRun:
		return t + HistoryToken(run) + ".*"
	case HistoryScopeAgent:
		return t + "*." + HistoryToken(agent)
	}
	return t + "*.*"
}
