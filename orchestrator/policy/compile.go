package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// rule is a compiled rule.
type rule struct {
	name                   string
	line                   int
	tools, agents, tenants []glob
	labels                 []label // sorted by key
	cond                   *condition
	// decision is what the rule decides when it matches.
	decision Decision
	// failClosed is what it decides when its condition errors, as if the
	// condition held (see Evaluate): a gate never allows, so an allow
	// rule gates, with default_rule's settings at least high risk; a rule
	// that gates or denies decides as it does when the condition holds.
	failClosed Decision
}

type label struct{ key, value string }

// compile reads and compiles a policy, collecting every problem (errors and
// warnings). The policy is meaningful only when no problem is an error.
func compile(data []byte) (*Policy, problems) {
	var ps problems
	root := readDocument(data, &ps, "write at least `default: require_approval`")
	if root == nil {
		return nil, ps
	}
	fs := readPolicy(root, &ps)

	p := &Policy{source: slices.Clone(data), sum: sha256.Sum256(data), def: fs.def, version: fs.version}
	if p.version == "" {
		p.version = "sha-" + hex.EncodeToString(p.sum[:])[:12]
	}

	resolveApprovers(&fs.defaultRule, fs.groups, &ps)
	for _, g := range riskTiers(fs) {
		resolveApprovers(g, fs.groups, &ps)
		checkQuorum(settingsFor("", g), g.where, g.quorumNode, SeverityError, &ps)
	}
	dRisk := compileDefault(p, fs, &ps)
	fallback := fallbackSettings(fs, dRisk)
	lines := strings.Split(string(data), "\n")
	for _, rs := range fs.rules {
		r := compileRule(rs, fs, fallback, p.version, lines, &ps)
		if rs.shadow {
			p.shadow = append(p.shadow, shadowRule{rule: r, pos: len(p.rules)})
			continue
		}
		p.rules = append(p.rules, r)
	}
	shadowWarnings(fs.rules, &ps)
	var conds []*condition
	for i := range p.rules {
		conds = append(conds, p.rules[i].cond)
	}
	for i := range p.shadow {
		conds = append(conds, p.shadow[i].cond)
	}
	p.history = historyUseOf(conds)
	p.reviewers = p.dflt.Reviewer != nil || slices.ContainsFunc(p.rules, func(r rule) bool {
		return r.decision.Reviewer != nil || r.failClosed.Reviewer != nil
	})
	layers := append([]*gateSpec{&fs.defaultRule}, riskTiers(fs)...)
	for _, rs := range fs.rules {
		layers = append(layers, &rs.gateSpec)
	}
	repeatWarnings(layers, &ps)
	return p, ps
}

// riskTiers are the risk_defaults the file sets, lowest risk first.
func riskTiers(fs *fileSpec) []*gateSpec {
	var tiers []*gateSpec
	for _, risk := range []string{contracts.RiskLow, contracts.RiskMedium, contracts.RiskHigh, contracts.RiskCritical} {
		if g := fs.riskDefault[risk]; g != nil {
			tiers = append(tiers, g)
		}
	}
	return tiers
}

// compileDefault compiles what calls no rule matches decide and returns
// default_rule's risk.
func compileDefault(p *Policy, fs *fileSpec, ps *problems) string {
	dRisk := cmp.Or(fs.defaultRule.risk, contracts.RiskMedium)
	ds := settingsFor(dRisk, &fs.defaultRule, fs.riskDefault[dRisk])
	if fs.def == ActionRequireApproval {
		checkQuorum(ds, "default_rule", posOf(fs.defaultRule.quorumNode, fs.defaultRule.node), SeverityError, ps)
		checkTimers(ds, &fs.defaultRule, "default_rule", ps)
		checkReviewerAlone(ds, "default_rule", ps)
		noteRepeat(ds)
	}
	checkOrder(ds, "default_rule", fs.defaultRule.node, ps)
	p.dflt = ds.decision(fs.def, defaultRuleName, p.version, 0)
	if fs.def == ActionAllow {
		ps.add(fs.defNode.Line, fs.defNode.Column, SeverityWarning,
			"default: allow runs every tool no rule names without approval, new tools included; require_approval fails closed")
	}
	return dRisk
}

// fallbackSettings are what an allow rule decides when its condition
// errors: default_rule's settings, at least high risk.
func fallbackSettings(fs *fileSpec, dRisk string) settings {
	fRisk := dRisk
	if riskRank(fRisk) < riskRank(contracts.RiskHigh) {
		fRisk = contracts.RiskHigh
	}
	return settingsFor(fRisk, &fs.defaultRule, fs.riskDefault[fRisk])
}

// compileRule compiles one rule: its matchers, its condition, and what it
// decides when it matches and when its condition errors. lines are the
// file's, for the condition's positions.
func compileRule(rs *ruleSpec, fs *fileSpec, fallback settings, version string, lines []string, ps *problems) rule {
	resolveApprovers(&rs.gateSpec, fs.groups, ps)
	r := rule{
		name: rs.name, line: rs.line,
		tools: compileGlobs(rs.tools), agents: compileGlobs(rs.agents), tenants: compileGlobs(rs.tenants),
	}
	for k, v := range rs.labels {
		r.labels = append(r.labels, label{k, v})
	}
	slices.SortFunc(r.labels, func(a, b label) int { return strings.Compare(a.key, b.key) })
	if strings.TrimSpace(rs.when) != "" && rs.whenNode != nil {
		cond, issues := compileCondition(rs.when)
		for _, is := range issues {
			line, col := conditionPos(rs.whenNode, lines, is.line, is.col)
			ps.add(line, col, SeverityError, "%s: when: %s", rs.where, is.msg)
		}
		r.cond = cond
	}
	risk := cmp.Or(rs.risk, fs.defaultRule.risk, contracts.RiskMedium)
	s := settingsFor(risk, &rs.gateSpec, fs.riskDefault[risk], &fs.defaultRule)
	s.reason = rs.reason
	r.decision = s.decision(rs.action, rs.name, version, rs.line)
	r.decision.Receipt = rs.receipt && rs.action == ActionAllow
	if rs.receipt && rs.action != ActionAllow {
		ps.add(rs.receiptKey.Line, rs.receiptKey.Column, SeverityWarning,
			"%s: receipt has no effect on a rule whose action is %s (an approved call gets its receipt when it is claimed)", rs.where, rs.action)
	}
	if rs.action == ActionRequireApproval {
		checkQuorum(s, rs.where, posOf(rs.quorumNode, rs.node), SeverityError, ps)
		checkOrder(s, rs.where, rs.node, ps)
		checkTimers(s, &rs.gateSpec, rs.where, ps)
		checkReviewerAlone(s, rs.where, ps)
		if s.stepUp != "" && s.grants != nil {
			ps.add(rs.line, 1, SeverityError, "%s: step_up passkey and grants cannot go together: a standing grant would run calls no passkey signed", rs.where)
		}
		noteRepeat(s)
		r.failClosed = r.decision
	} else if rs.action == ActionDeny {
		ignoredSettings(rs, ps)
		r.failClosed = r.decision
	} else {
		ignoredSettings(rs, ps)
		r.failClosed = fallback.decision(ActionRequireApproval, rs.name, version, rs.line)
		r.failClosed.Sensitive = sensitiveOf(&rs.gateSpec, &fs.defaultRule)
		r.failClosed.sensitiveFields = fieldMatchersOf(&rs.gateSpec, &fs.defaultRule)
		if r.cond != nil {
			noteRepeat(fallback)
			checkQuorum(fallback, rs.where+" (gated when its condition errors, with default_rule's settings)",
				posOf(rs.node, nil), SeverityWarning, ps)
		}
		r.failClosed.Reason = ""
	}
	return r
}

// settings are the gate settings of a decision after precedence.
type settings struct {
	risk        string
	approvers   []string
	unresolved  bool
	quorum      int
	quorumFrom  string
	veto, self  bool
	order       string
	channels    []string
	timeout     time.Duration
	claimWithin time.Duration
	onTimeout   string
	stepUp      string
	notify      []contracts.NotifyStage
	allowed     []string
	summary     string
	reason      string
	sensitive   []string
	fields      []*fieldMatcher
	grants      *grantsSpec
	reviewer    *reviewerSpec
	// Timers, with the layer each comes from (nil: not set).
	reminders     []time.Duration
	remindersFrom *gateSpec
	tiers         []*tierSpec
	tiersFrom     *gateSpec
	repeat        int
	repeatFrom    *gateSpec
}

// settingsFor merges gate settings: for each one, the first layer that sets
// it wins, then the built-in safe default. Nil layers are skipped.
func settingsFor(risk string, layers ...*gateSpec) settings {
	s := settings{
		risk: cmp.Or(risk, contracts.RiskMedium), quorum: 1, veto: true, order: contracts.OrderAny,
		timeout: DefaultTimeout, onTimeout: contracts.OnTimeoutReject, claimWithin: contracts.DefaultClaimWithin,
		allowed: []string{contracts.DecisionApprove, contracts.DecisionReject},
	}
	var approvers, quorum, veto, self, order, channels, timeout, onTimeout, allowed, summary, claim bool
	var reminders, escalation, repeat bool
	for _, g := range layers {
		if g == nil {
			continue
		}
		if !approvers && len(g.approvers) > 0 {
			approvers = true
			s.approvers, s.unresolved = g.resolved, g.unresolved
		}
		if !quorum && g.quorumNode != nil {
			quorum = true
			s.quorum, s.quorumFrom = g.quorum, g.where
		}
		if !veto && g.veto != nil {
			veto, s.veto = true, *g.veto
		}
		if !self && g.selfApproval != nil {
			self, s.self = true, *g.selfApproval
		}
		if !order && g.order != "" {
			order, s.order = true, g.order
		}
		if !channels && len(g.channels) > 0 {
			channels, s.channels = true, g.channels
		}
		if !timeout && g.timeout > 0 {
			timeout, s.timeout = true, g.timeout
		}
		if !claim && g.claimWithin > 0 {
			claim, s.claimWithin = true, g.claimWithin
		}
		if !onTimeout && g.onTimeout != "" {
			onTimeout, s.onTimeout = true, g.onTimeout
		}
		if !allowed && len(g.allowed) > 0 {
			allowed, s.allowed = true, g.allowed
		}
		if s.stepUp == "" && g.stepUp != "" {
			s.stepUp = g.stepUp
		}
		if s.notify == nil && g.notifySet {
			s.notify = g.notify
		}
		if s.grants == nil && g.grants != nil {
			s.grants = g.grants
		}
		if s.reviewer == nil && g.reviewer != nil {
			s.reviewer = g.reviewer
		}
		if !summary && g.summary != "" {
			summary, s.summary = true, g.summary
		}
		if !reminders && g.remindersSet {
			reminders, s.reminders, s.remindersFrom = true, g.reminders, g
		}
		if !escalation && g.escalationKey != nil {
			escalation, s.tiers, s.tiersFrom = true, g.escalation, g
		}
		if !repeat && g.repeatNode != nil {
			repeat, s.repeat, s.repeatFrom = true, g.repeat, g
		}
	}
	if len(layers) > 0 && layers[0] != nil {
		s.reason = layers[0].reason
	}
	s.sensitive = sensitiveOf(layers...)
	s.fields = fieldMatchersOf(layers...)
	return s
}

func (s settings) decision(action, rule, version string, line int) Decision {
	d := Decision{
		Action: action, Rule: rule, Version: version, Line: line, Reason: s.reason,
		Risk: s.risk, Approvers: slices.Clone(s.approvers), Quorum: s.quorum, Veto: s.veto,
		AllowSelfApproval: s.self, Order: s.order, Timeout: s.timeout, OnTimeout: s.onTimeout, ClaimWithin: s.claimWithin,
		AllowedDecisions: slices.Clone(s.allowed), Channels: slices.Clone(s.channels), Summary: s.summary,
		Reminders: slices.Clone(s.reminders), Sensitive: slices.Clone(s.sensitive), sensitiveFields: s.fields,
		Grants: limitsOf(s.grants), StepUp: s.stepUp, Notify: slices.Clone(s.notify),
		Reviewer: reviewerOf(s.reviewer),
	}
	d.Escalation, _ = s.ladder()
	switch {
	case action != ActionDeny:
		d.Reason = ""
	case d.Reason == "" && rule == defaultRuleName:
		d.Reason = "No policy rule allows this tool."
	case d.Reason == "":
		d.Reason = fmt.Sprintf("Policy rule %q denies this tool.", rule)
	}
	return d
}

// ladder is the escalation of a decision: the tiers, run again
// escalation_repeat times (each run starting where the previous one ended,
// at the last tier's after), without the tiers the timeout cuts off, which
// can never fire; dropped counts those. A tier without channels is told on
// the decision's.
func (s settings) ladder() (tiers []EscalationTier, dropped int) {
	if len(s.tiers) == 0 {
		return nil, 0
	}
	cycle := s.tiers[len(s.tiers)-1].after
	total := len(s.tiers) * (s.repeat + 1)
	for i := range total {
		t := s.tiers[i%len(s.tiers)]
		after := t.after + time.Duration(i/len(s.tiers))*cycle
		if after >= s.timeout {
			return tiers, total - i
		}
		channels := t.channels
		if len(channels) == 0 {
			channels = s.channels
		}
		tiers = append(tiers, EscalationTier{After: after, Approvers: t.resolved, Channels: channels})
	}
	return tiers, 0
}

// resolveApprovers resolves the approver groups of a layer and of its
// escalation tiers.
func resolveApprovers(g *gateSpec, groups map[string][]string, ps *problems) {
	g.resolved, g.unresolved = resolveGroups(g.approvers, g.approverNodes, groups, g.where+": approvers", ps)
	for _, t := range g.escalation {
		t.resolved, t.unresolved = resolveGroups(t.approvers, t.approverNodes, groups,
			g.where+": escalation["+itoa(t.index)+"].approvers", ps)
	}
}

// resolveGroups replaces "group:NAME" entries by the group's members,
// keeping the order and dropping repeats. A group the policy does not define
// stays as written (nobody's id, so it can only fail closed) and is warned
// about; unresolved reports one.
func resolveGroups(list []string, nodes []*yaml.Node, groups map[string][]string, what string, ps *problems) (resolved []string, unresolved bool) {
	seen := map[string]bool{}
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			resolved = append(resolved, id)
		}
	}
	for i, a := range list {
		name, isGroup := strings.CutPrefix(a, groupPrefix)
		if !isGroup {
			add(a)
			continue
		}
		members, ok := groups[name]
		if !ok {
			n := nodes[i]
			ps.add(n.Line, n.Column, SeverityWarning, "%s: unknown approver group %q (define it under groups:); until it is, nobody can approve as it", what, name)
			(*ps)[len(*ps)-1].Group = name
			unresolved = true
			add(a)
			continue
		}
		for _, m := range members {
			add(m)
		}
	}
	return resolved, unresolved
}

// checkQuorum refuses a quorum that the listed approvers, with those the
// escalation tiers add before the request expires, cannot meet.
func checkQuorum(s settings, where string, at *yaml.Node, sev string, ps *problems) {
	if len(s.approvers) == 0 || s.unresolved {
		return
	}
	pool := slices.Clone(s.approvers)
	for _, t := range s.tiers {
		if t.after >= s.timeout {
			break
		}
		if t.unresolved {
			return
		}
		for _, id := range t.resolved {
			if !slices.Contains(pool, id) {
				pool = append(pool, id)
			}
		}
	}
	if s.quorum <= len(pool) {
		return
	}
	from := ""
	if s.quorumFrom != "" && !strings.HasPrefix(where, s.quorumFrom) {
		from = " (from " + s.quorumFrom + ")"
	}
	line, col := 0, 0
	if at != nil {
		line, col = at.Line, at.Column
	}
	ps.add(line, col, sev, "%s: quorum %d%s cannot be met by %d distinct approvers (%s)",
		where, s.quorum, from, len(pool), strings.Join(pool, ", "))
}

// checkTimers warns about reminders and escalation tiers of a gated
// decision that can never fire because the request expires first. own is
// the layer the decision is made by (the rule, or default_rule): timers it
// sets itself are pointed at, inherited ones are reported at own.
func checkTimers(s settings, own *gateSpec, where string, ps *problems) {
	at := func(n *yaml.Node) (int, int) {
		if n == nil {
			return 0, 0
		}
		return n.Line, n.Column
	}
	var late []string
	for i, r := range s.reminders {
		if r < s.timeout {
			continue
		}
		if s.remindersFrom == own {
			line, col := at(s.remindersFrom.reminderNodes[i])
			ps.add(line, col, SeverityWarning, "%s: reminders[%d]: %s never fires: the request expires first (timeout %s)",
				where, i, shortDuration(r), shortDuration(s.timeout))
			continue
		}
		late = append(late, shortDuration(r))
	}
	if len(late) > 0 {
		line, col := at(own.node)
		ps.add(line, col, SeverityWarning, "%s: reminders %s (from %s) never fire: the request expires first (timeout %s)",
			where, strings.Join(late, ", "), s.remindersFrom.where, shortDuration(s.timeout))
	}

	kept, dropped := s.ladder()
	if dropped == 0 {
		return
	}
	first := len(kept) // the index of the first tier dropped
	after := s.tiers[first%len(s.tiers)].after + time.Duration(first/len(s.tiers))*s.tiers[len(s.tiers)-1].after
	var pos *yaml.Node
	from := ""
	switch {
	case s.tiersFrom != own:
		pos, from = own.node, " (from "+s.tiersFrom.where+")"
	case first < len(s.tiers):
		pos = s.tiers[first].afterNode
	case s.repeatFrom == own:
		pos = own.repeatNode
	default:
		pos = own.escalationKey
	}
	line, col := at(pos)
	if dropped == 1 {
		ps.add(line, col, SeverityWarning, "%s: the escalation tier after %s%s never fires: the request expires first (timeout %s); it is left out of the request",
			where, shortDuration(after), from, shortDuration(s.timeout))
		return
	}
	ps.add(line, col, SeverityWarning, "%s: %d escalation tiers%s, from the one after %s on, never fire: the request expires first (timeout %s); they are left out of the request",
		where, dropped, from, shortDuration(after), shortDuration(s.timeout))
}

// noteRepeat records, for the layer a decision takes escalation_repeat
// from, that it applies and whether there are tiers to repeat.
func noteRepeat(s settings) {
	if g := s.repeatFrom; g != nil {
		g.repeatApplied = true
		g.repeatUseful = g.repeatUseful || len(s.tiers) > 0
	}
}

// repeatWarnings warns about an escalation_repeat that applies only to
// decisions without escalation tiers.
func repeatWarnings(layers []*gateSpec, ps *problems) {
	for _, g := range layers {
		if g.repeatNode != nil && g.repeat > 0 && g.repeatApplied && !g.repeatUseful {
			ps.add(g.repeatNode.Line, g.repeatNode.Column, SeverityWarning,
				"%s: escalation_repeat has no effect: there are no escalation tiers to repeat", g.where)
		}
	}
}

// checkOrder warns about sequence order without approvers to order.
func checkOrder(s settings, where string, at *yaml.Node, ps *problems) {
	if s.order == contracts.OrderSequence && len(s.approvers) == 0 && at != nil {
		ps.add(at.Line, at.Column, SeverityWarning, "%s: order: sequence needs approvers to put in order", where)
	}
}

// ignoredSettings warns about gate settings on a rule that does not gate.
func ignoredSettings(rs *ruleSpec, ps *problems) {
	for _, f := range rs.set {
		if f.name() == "reason" && rs.action == ActionDeny {
			continue
		}
		if (f.name() == "sensitive" || f.name() == "sensitive_fields") && rs.when != "" && rs.action == ActionAllow {
			continue // the call gates, masked, when the condition errors
		}
		ps.add(f.key.Line, f.key.Column, SeverityWarning, "%s: %s has no effect on a rule whose action is %s", rs.where, f.name(), rs.action)
	}
}

// posOf returns the first non-nil node.
func posOf(nodes ...*yaml.Node) *yaml.Node {
	for _, n := range nodes {
		if n != nil {
			return n
		}
	}
	return nil
}

// conditionPos maps a position within a condition (line from 1, column
// from 0) to the file. Block scalars start on the line after the key; quoted
// ones one column after the quote. Escapes and folded lines can shift the
// column; the line stays right.
func conditionPos(n *yaml.Node, lines []string, line, col int) (int, int) {
	if line < 1 {
		return n.Line, n.Column
	}
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		// The block's indentation is its first non-empty line's.
		indent := 0
		for i := n.Line; i < len(lines); i++ {
			if l := lines[i]; strings.TrimSpace(l) != "" {
				indent = len(l) - len(strings.TrimLeft(l, " "))
				break
			}
		}
		return n.Line + line, indent + 1 + col
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		if line == 1 {
			return n.Line, n.Column + 1 + col
		}
		return n.Line + line - 1, 0
	default:
		if line == 1 {
			return n.Line, n.Column + col
		}
		return n.Line + line - 1, 0
	}
}
