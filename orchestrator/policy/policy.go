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
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

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
		return fmt.Errorf("line %d: invalid duration %q (want a Go duration such as \"90m\" or \"4h\")", n.Line, s)
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
// cannot silently weaken a rule. So are an empty file and a second YAML
// document, which would otherwise be read as "no rules" or ignored.
func Parse(data []byte) (*Policy, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if emptyDocument(&root) {
		return nil, errors.New("policy: the file is empty (write at least `default: require_approval`)")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		if !emptyDocument(&extra) {
			return nil, fmt.Errorf("policy: line %d: a second YAML document; a policy is one document", extra.Line)
		}
	}
	recordLines(&root, &p)
	if p.Default == "" {
		p.Default = ActionRequireApproval
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// emptyDocument reports whether doc holds nothing but comments or null.
func emptyDocument(doc *yaml.Node) bool {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
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

// defaultRuleName is the rule name Evaluate reports for calls no rule matches.
const defaultRuleName = "default"

func (p *Policy) validate() error {
	var errs []error
	if !validAction(p.Default) {
		errs = append(errs, fmt.Errorf("policy: default: unknown action %q (allow, deny, require_approval)", p.Default))
	}
	if err := p.DefaultRule.validateDefault("policy: default_rule"); err != nil {
		errs = append(errs, err)
	}
	names := map[string]bool{}
	for i := range p.Rules {
		r := &p.Rules[i]
		where := fmt.Sprintf("policy: rules[%d] (line %d)", i, r.line)
		if r.Name == "" {
			r.Name = fmt.Sprintf("rule-%d", i+1)
		}
		if r.Name == defaultRuleName {
			errs = append(errs, fmt.Errorf("%s: the rule name %q is reserved for calls no rule matches", where, r.Name))
		}
		if names[r.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate rule name %q", where, r.Name))
		}
		names[r.Name] = true
		if len(r.Tools) == 0 {
			errs = append(errs, fmt.Errorf("%s: tools must list at least one tool name or glob", where))
		}
		for j, g := range r.Tools {
			if err := checkGlob(g); err != nil {
				errs = append(errs, fmt.Errorf("%s: tools[%d]: %w", where, j, err))
			}
		}
		for j, g := range r.Agents {
			if err := checkGlob(g); err != nil {
				errs = append(errs, fmt.Errorf("%s: agents[%d]: %w", where, j, err))
			}
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

// validateDefault checks default_rule: gate settings and a deny reason only.
// Matching and the action belong to the rules and to default; set here they
// would be silently ignored.
func (r *Rule) validateDefault(where string) error {
	var errs []error
	if r.Name != "" {
		errs = append(errs, fmt.Errorf("%s: name cannot be set (calls gated by the default report rule %q)", where, defaultRuleName))
	}
	if len(r.Tools) > 0 || len(r.Agents) > 0 {
		errs = append(errs, fmt.Errorf("%s: tools and agents cannot be set (default_rule applies to calls no rule matches)", where))
	}
	if r.Action != "" {
		errs = append(errs, fmt.Errorf("%s: action cannot be set (use the top-level default)", where))
	}
	if err := r.validateGate(where); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkGlob rejects globs that cannot mean what their author intended: '*'
// and '?' are the only wildcards, so brackets, braces and backslashes would
// match only themselves.
func checkGlob(g string) error {
	switch {
	case g == "":
		return errors.New("empty glob")
	case !utf8.ValidString(g):
		return fmt.Errorf("invalid glob %q: not valid UTF-8", g)
	case strings.TrimSpace(g) != g:
		return fmt.Errorf("invalid glob %q: leading or trailing space", g)
	case strings.ContainsAny(g, `[]{}\`):
		return fmt.Errorf("invalid glob %q: only * and ? are wildcards; [ ] { } and \\ are not supported", g)
	}
	return nil
}

func (r *Rule) validateGate(where string) error {
	var errs []error
	switch r.Risk {
	case "", contracts.RiskLow, contracts.RiskMedium, contracts.RiskHigh, contracts.RiskCritical:
	default:
		errs = append(errs, fmt.Errorf("%s: unknown risk %q (low, medium, high, critical)", where, r.Risk))
	}
	switch r.OnTimeout {
	case "", contracts.OnTimeoutReject, contracts.OnTimeoutApprove:
	default:
		errs = append(errs, fmt.Errorf("%s: on_timeout %q: must be reject or approve", where, r.OnTimeout))
	}
	seen := make(map[string]bool, len(r.Approvers))
	for j, a := range r.Approvers {
		switch {
		case a == "":
			errs = append(errs, fmt.Errorf("%s: approvers[%d] is empty", where, j))
		case seen[a]:
			errs = append(errs, fmt.Errorf("%s: approvers[%d]: %q is listed twice", where, j, a))
		}
		seen[a] = true
	}
	switch {
	case r.Quorum < 0:
		errs = append(errs, fmt.Errorf("%s: quorum %d must not be negative", where, r.Quorum))
	case len(r.Approvers) > 0 && r.Quorum > len(seen):
		errs = append(errs, fmt.Errorf("%s: quorum %d cannot be met by %d distinct approvers", where, r.Quorum, len(seen)))
	}
	if r.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%s: timeout %s must be positive", where, time.Duration(r.Timeout)))
	}
	for _, d := range r.AllowedDecisions {
		switch d {
		case contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond:
		default:
			errs = append(errs, fmt.Errorf("%s: unknown decision %q in allowed_decisions (approve, reject, edit, respond)", where, d))
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
	d.Rule = defaultRuleName
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
// characters (dots and slashes included) and '?' any one character (one
// UTF-8 encoded rune, not one byte).
func Match(glob, name string) bool {
	// Iterative wildcard matching with backtracking to the last '*'. Every
	// step advances by whole runes, so positions stay on rune boundaries.
	gi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(name) {
		if gi < len(glob) {
			switch c := glob[gi]; {
			case c == '*':
				if gi+1 == len(glob) {
					return true // a trailing '*' takes the rest
				}
				star, mark = gi, ni
				gi++
				continue
			case c == '?':
				gi++
				ni += runeLen(name, ni)
				continue
			case c == name[ni]:
				gi++
				ni++
				continue
			}
		}
		if star < 0 {
			return false
		}
		// Let the last '*' take one more rune and retry after it. When an
		// ASCII literal follows the '*', skip straight to its next
		// occurrence (an ASCII byte is never inside a multi-byte rune).
		mark += runeLen(name, mark)
		if c := glob[star+1]; c != '*' && c != '?' && c < utf8.RuneSelf {
			for mark < len(name) && name[mark] != c {
				mark++
			}
			if mark == len(name) {
				return false
			}
		}
		gi, ni = star+1, mark
	}
	for gi < len(glob) && glob[gi] == '*' {
		gi++
	}
	return gi == len(glob)
}

// runeLen is the byte length of the rune at s[i:].
func runeLen(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return n
}
