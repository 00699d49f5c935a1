package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// Actions.
const (
	ActionAllow           = "allow"
	ActionDeny            = "deny"
	ActionRequireApproval = "require_approval"
)

// DefaultTimeout is how long a request waits for a decision when no rule,
// risk tier or default_rule names a timeout.
const DefaultTimeout = 24 * time.Hour

// MaxClaimWithin bounds claim_within: an approval is a right to run one
// call soon, not a standing grant (grants are for that).
const MaxClaimWithin = 24 * time.Hour

// defaultRuleName is the rule name decisions report for calls no rule
// matches.
const defaultRuleName = "default"

// BuiltinVersion is the version of the policy Default returns.
const BuiltinVersion = "builtin"

// Input is one tool call to decide.
type Input struct {
	Run  contracts.Run
	Tool string
	// Arguments is a JSON object; nil or empty means {}.
	Arguments json.RawMessage
	// History answers the conditions' history functions (history.count,
	// ...) for this call; nil: they error, and the call gets the strictest
	// of the rules it could fall under.
	History History
}

// Decision is what the policy says about one call.
type Decision struct {
	Action string
	// Rule names the deciding rule; "default" when no rule matched.
	Rule    string
	Version string
	// Line is the line of the deciding rule in the policy file; 0 for the
	// default.
	Line int
	// Reason is the message for the model when denied.
	Reason string
	// Error is set when a condition failed while it ran (a missing argument,
	// a wrong type, the cost limit); the first, when several did. The call
	// then gets the strictest of the rules it could fall under: Action is
	// require_approval or deny, never allow.
	Error string
	// Gate settings, meaningful when Action is require_approval. Approvers
	// holds user ids; groups the policy defines are resolved to their
	// members.
	Risk              string
	Approvers         []string
	Quorum            int
	Veto              bool
	AllowSelfApproval bool
	Order             string
	Timeout           time.Duration
	OnTimeout         string
	// ClaimWithin is how long after its decision an approval may be
	// claimed before it lapses (claim_within; default 15 minutes).
	ClaimWithin      time.Duration
	AllowedDecisions []string
	Channels         []string
	// Notify is the rule's staggered notification (notify:): routes told
	// in order, each after its delay while the request is pending and the
	// person has not opened it; nil when the rule sets none.
	Notify []contracts.NotifyStage
	// Summary is the rule's summary template ({{args.NAME}}, {{tool}},
	// {{agent}}), not yet rendered.
	Summary string
	// Reminders are when, after the request was created, approvers who
	// have not voted are told again; increasing.
	Reminders []time.Duration
	// Escalation is the ladder of tiers, by increasing After, with
	// escalation_repeat already expanded and the tiers the timeout cuts off
	// left out.
	Escalation []EscalationTier
	// Sensitive are the JSON pointer patterns (a "*" segment matches any
	// key or index) of the argument values a request shows masked outside
	// Countersign: the rule's and default_rule's together. The gate expands
	// them against the call's arguments (approval.ExpandPointers).
	Sensitive []string
	// sensitiveFields are the sensitive_fields expressions of the rule and
	// default_rule (see SensitivePointers).
	sensitiveFields []*fieldMatcher
	// Grants are the standing grants the rule permits an approver to give
	// (nil: only the call). Meaningful when Action is require_approval.
	Grants *contracts.GrantLimits
	// StepUp is what an approval must carry beyond the approver's
	// identity: contracts.StepUpPasskey, or "" (step_up, from the rule,
	// default_rule or the risk tier). Meaningful when Action is
	// require_approval.
	StepUp string
	// Reviewer is the automated first reviewer the rule, default_rule or
	// the risk tier names (reviewer:), or nil. Meaningful when Action is
	// require_approval. The arbiter freezes it in the record from the
	// policy it checks the request against, never from the request.
	Reviewer *Reviewer
	// Receipt says the rule allows the call with a receipt (receipt: true):
	// the HTTP API signs one for the policy decision. Only an allow
	// decision sets it; an agent's own process never signs.
	Receipt bool
}

// SensitivePointers are the concrete pointers of the values of args a
// request under d shows masked: those the Sensitive patterns name, those
// the tool schema marks, and the fields the sensitive_fields expressions
// hold true for. The gate puts them in the request; the arbiter's check
// computes them again.
func (d Decision) SensitivePointers(args, schema json.RawMessage) []string {
	out := append(approval.SensitivePointers(args, schema, d.Sensitive), fieldPointers(args, d.sensitiveFields)...)
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EscalationTier widens a pending request: from After (since the request
// was created) on, Approvers may approve it too, and they are told on
// Channels.
type EscalationTier struct {
	After time.Duration
	// Approvers holds user ids; groups the policy defines are resolved to
	// their members, others stay "group:NAME".
	Approvers []string
	// Channels are the tier's own, else the decision's.
	Channels []string
}

// Policy is a parsed, compiled policy. It is immutable and safe for
// concurrent use.
type Policy struct {
	version string
	source  []byte
	sum     [sha256.Size]byte
	def     string
	rules   []rule
	// shadow are the shadow rules, in file order (see shadow.go); rules
	// holds the enforcing ones only.
	shadow []shadowRule
	// dflt decides calls no rule matches.
	dflt  Decision
	index toolIndex
	// history is what the conditions read of the history of calls.
	history HistoryUse
	// reviewers: some decision names an automated reviewer.
	reviewers bool
}

// Parse reads, validates and compiles a policy; every CEL condition is
// compiled here, once. Unknown fields are errors, so a typo cannot silently
// weaken a rule. When the policy is invalid the error is an *Errors listing
// every problem with its line.
func Parse(data []byte) (*Policy, error) {
	p, ps := compile(data)
	if errs := ps.errors(); len(errs) > 0 {
		return nil, &Errors{Problems: errs}
	}
	return p, nil
}

// Load reads and parses a policy file. Problems are reported with the path.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		var errs *Errors
		if errors.As(err, &errs) {
			errs.File = path
			return nil, errs
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Default is the policy used when none is configured: every tool call
// requires approval, with the built-in gate settings.
func Default() *Policy {
	p := &Policy{version: BuiltinVersion, def: ActionRequireApproval}
	p.dflt = settingsFor("").decision(ActionRequireApproval, defaultRuleName, p.version, 0)
	return p
}

// Version is the policy's `version:`, or, when the file has none, "sha-"
// and the first 12 hex digits of the SHA-256 of the file.
func (p *Policy) Version() string { return p.version }

// DefaultAction is what happens to calls no rule matches.
func (p *Policy) DefaultAction() string { return p.def }

// Source returns a copy of the file the policy was parsed from (nil for
// Default).
func (p *Policy) Source() []byte {
	if p.source == nil {
		return nil
	}
	return append([]byte(nil), p.source...)
}

// SHA256 is the hex SHA-256 of the file the policy was parsed from.
func (p *Policy) SHA256() string { return hex.EncodeToString(p.sum[:]) }

// RuleNames lists the enforcing rules in file order (ShadowRules lists
// the others).
func (p *Policy) RuleNames() []string {
	names := make([]string, len(p.rules))
	for i := range p.rules {
		names[i] = p.rules[i].name
	}
	return names
}
