// Package policy decides, per tool call, whether it is allowed, denied, or
// must wait for a human. A policy is an ordered list of rules read from
// YAML; the first rule whose tool glob (and agent glob) matches decides, and
// calls no rule matches get the policy's default action, which is
// require_approval unless the file says otherwise: unknown tools fail closed.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// Actions.
const (
	ActionAllow           = "allow"
	ActionDeny            = "deny"
	ActionRequireApproval = "require_approval"
)

// DefaultTimeout is how long a request waits for a decision when its rule
// names no timeout.
const DefaultTimeout = 24 * time.Hour

// Policy is a parsed, validated policy.
type Policy struct {
	Version string `yaml:"version"`
	Default string `yaml:"default"`
	Rules   []Rule `yaml:"rules"`
	// DefaultRule settings apply to calls gated by the default action.
	DefaultRule Rule `yaml:"default_rule"`
}

// Rule matches tool calls by glob and says what to do with them.
type Rule struct {
	Name   string   `yaml:"name"`
	Tools  []string `yaml:"tools"`
	Agents []string `yaml:"agents"`
	Action string   `yaml:"action"`
	// Reason is returned to the agent when the rule denies.
	Reason string `yaml:"reason"`

	Risk              string   `yaml:"risk"`
	Approvers         []string `yaml:"approvers"`
	Quorum            int      `yaml:"quorum"`
	Veto              *bool    `yaml:"veto"`
	AllowSelfApproval bool     `yaml:"allow_self_approval"`
	Timeout           Duration `yaml:"timeout"`
	OnTimeout         string   `yaml:"on_timeout"`
	AllowedDecisions  []string `yaml:"allowed_decisions"`
	Channels          []string `yaml:"channels"`
	Summary           string   `yaml:"summary"`

	line int
}

// Duration reads Go duration strings ("90m", "24h") from YAML.
type Duration time.Duration

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: invalid duration %q", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// Decision is what the policy says about one call.
type Decision struct {
	Action  string
	Rule    string
	Version string
	// Reason is the message for the model when denied.
	Reason string
	// Gate settings, filled when Action is require_approval.
	Risk              string
	Approvers         []string
	Quorum            int
	Veto              bool
	AllowSelfApproval bool
	Timeout           time.Duration
	OnTimeout         string
	AllowedDecisions  []string
	Channels          []string
	Summary           string
}

// Parse reads and validates a policy. Unknown fields are errors, so a typo
// cannot silently weaken a rule.
func Parse(data []byte) (*Policy, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	_ = yaml.Unmarshal(data, &root)
	recordLines(&root, &p)
	if p.Default == "" {
		p.Default = ActionRequireApproval
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Load reads a policy file.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Default is the policy used when none is configured: every tool call
// requires approval.
func Default() *Policy {
	return &Policy{Version: "builtin", Default: ActionRequireApproval}
}

func recordLines(root *yaml.Node, p *Policy) {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "rules" {
			for j, r := range m.Content[i+1].Content {
				if j < len(p.Rules) {
					p.Rules[j].line = r.Line
				}
			}
		}
	}
}

func validAction(a string) bool {
	return a == ActionAllow || a == ActionDeny || a == ActionRequireApproval
}

func (p *Policy) validate() error {
	var errs []error
	if !validAction(p.Default) {
		errs = append(errs, fmt.Errorf("policy: default: unknown action %q", p.Default))
	}
	if err := p.DefaultRule.validateGate("default_rule"); err != nil {
		errs = append(errs, err)
	}
	names := map[string]bool{}
	for i := range p.Rules {
		r := &p.Rules[i]
		where := fmt.Sprintf("policy: rules[%d] (line %d)", i, r.line)
		if r.Name == "" {
			r.Name = fmt.Sprintf("rule-%d", i+1)
		}
		if names[r.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate rule name %q", where, r.Name))
		}
		names[r.Name] = true
		if len(r.Tools) == 0 {
			errs = append(errs, fmt.Errorf("%s: tools must list at least one tool name or glob", where))
		}
		if !validAction(r.Action) {
			errs = append(errs, fmt.Errorf("%s: unknown action %q (allow, deny, require_approval)", where, r.Action))
		}
		if err := r.validateGate(where); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Rule) validateGate(where string) error {
	var errs []error
	switch r.Risk {
	case "", contracts.RiskLow, contracts.RiskMedium, contracts.RiskHigh, contracts.RiskCritical:
	default:
		errs = append(errs, fmt.Errorf("%s: unknown risk %q", where, r.Risk))
	}
	switch r.OnTimeout {
	case "", contracts.OnTimeoutReject, contracts.OnTimeoutApprove:
	default:
		errs = append(errs, fmt.Errorf("%s: on_timeout must be reject or approve", where))
	}
	if r.Quorum < 0 || (len(r.Approvers) > 0 && r.Quorum > len(r.Approvers)) {
		errs = append(errs, fmt.Errorf("%s: quorum %d cannot be met by %d approvers", where, r.Quorum, len(r.Approvers)))
	}
	if r.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%s: timeout must be positive", where))
	}
	for _, d := range r.AllowedDecisions {
		switch d {
		case contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond:
		default:
			errs = append(errs, fmt.Errorf("%s: unknown decision %q", where, d))
		}
	}
	return errors.Join(errs...)
}

// Evaluate decides one call of tool by agent.
func (p *Policy) Evaluate(agent, tool string) Decision {
	for i := range p.Rules {
		r := &p.Rules[i]
		if !matchAny(r.Tools, tool) || (len(r.Agents) > 0 && !matchAny(r.Agents, agent)) {
			continue
		}
		return r.decision(p.Version)
	}
	d := p.DefaultRule.decision(p.Version)
	d.Action = p.Default
	d.Rule = "default"
	if d.Action == ActionDeny && d.Reason == "" {
		d.Reason = "No policy rule allows this tool."
	}
	return d
}

func (r *Rule) decision(version string) Decision {
	d := Decision{
		Action: r.Action, Rule: r.Name, Version: version, Reason: r.Reason,
		Risk: r.Risk, Approvers: slices.Clone(r.Approvers), Quorum: r.Quorum, Veto: true,
		AllowSelfApproval: r.AllowSelfApproval, Timeout: time.Duration(r.Timeout), OnTimeout: r.OnTimeout,
		AllowedDecisions: slices.Clone(r.AllowedDecisions), Channels: slices.Clone(r.Channels), Summary: r.Summary,
	}
	if r.Veto != nil {
		d.Veto = *r.Veto
	}
	if d.Action == ActionDeny && d.Reason == "" {
		d.Reason = fmt.Sprintf("Policy rule %q denies this tool.", r.Name)
	}
	if d.Risk == "" {
		d.Risk = contracts.RiskMedium
	}
	if d.Quorum == 0 {
		d.Quorum = 1
	}
	if d.Timeout == 0 {
		d.Timeout = DefaultTimeout
	}
	if d.OnTimeout == "" {
		d.OnTimeout = contracts.OnTimeoutReject
	}
	if len(d.AllowedDecisions) == 0 {
		d.AllowedDecisions = []string{contracts.DecisionApprove, contracts.DecisionReject}
	}
	return d
}

func matchAny(globs []string, s string) bool {
	for _, g := range globs {
		if Match(g, s) {
			return true
		}
	}
	return false
}

// Match reports whether name matches glob, where '*' matches any run of
// characters (dots and slashes included) and '?' any one character.
func Match(glob, name string) bool {
	// Iterative wildcard matching with backtracking to the last '*'.
	gi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(name) {
		switch {
		case gi < len(glob) && (glob[gi] == '?' || glob[gi] == name[ni]):
			gi++
			ni++
		case gi < len(glob) && glob[gi] == '*':
			star, mark = gi, ni
			gi++
		case star >= 0:
			gi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for gi < len(glob) && glob[gi] == '*' {
		gi++
	}
	return gi == len(glob)
}
