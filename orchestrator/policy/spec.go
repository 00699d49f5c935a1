package policy

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// This file reads a policy file into specs: what the file says, checked
// field by field, before rules are compiled.

// Field names of the file.
var (
	topKeys  = []string{"version", "default", "default_rule", "groups", "risk_defaults", "rules"}
	gateKeys = []string{"risk", "approvers", "quorum", "veto", "allow_self_approval", "order",
		"channels", "timeout", "on_timeout", "claim_within", "allowed_decisions", "summary", "reason",
		"reminders", "escalation", "escalation_repeat", "sensitive", "sensitive_fields", "grants", "step_up", "notify", "reviewer"}
	riskDefaultKeys = []string{"approvers", "quorum", "veto", "allow_self_approval", "order",
		"channels", "timeout", "on_timeout", "claim_within", "allowed_decisions",
		"reminders", "escalation", "escalation_repeat", "step_up", "notify", "reviewer"}
	tierKeys  = []string{"after", "approvers", "channels"}
	matchKeys = []string{"name", "agents", "tools", "tenants", "labels", "when", "action", "mode"}
	ruleKeys  = append(append(append([]string{}, matchKeys...), gateKeys...), "receipt")
)

// groupPrefix marks an approver entry that names a group.
const groupPrefix = "group:"

// Bounds of the timers a rule can set.
const (
	maxReminders        = 10
	maxEscalationTiers  = 10
	maxEscalationRepeat = 9
)

// fileSpec is what a policy file says.
type fileSpec struct {
	version     string
	def         string
	defNode     *yaml.Node
	defaultRule gateSpec
	groups      map[string][]string
	riskDefault map[string]*gateSpec
	rules       []*ruleSpec
}

// gateSpec holds the gate settings of a rule, of default_rule or of a risk
// tier; zero values mean "not set".
type gateSpec struct {
	// claimWithin is how long an approval may be claimed (0: not set).
	claimWithin   time.Duration
	where         string // "rule \"x\"", "default_rule", "risk_defaults.high"
	node          *yaml.Node
	risk          string
	approvers     []string
	approverNodes []*yaml.Node
	quorum        int
	quorumNode    *yaml.Node
	veto          *bool
	selfApproval  *bool
	order         string
	channels      []string
	timeout       time.Duration
	onTimeout     string
	allowed       []string
	summary       string
	reason        string
	// sensitive are JSON pointer patterns of argument values to mask.
	sensitive []string
	// sensitiveFields masks the fields whose names it holds true for.
	sensitiveFields *fieldMatcher
	// grants is the standing grants setting (nil: not set).
	grants *grantsSpec
	// stepUp is what an approval must carry beyond identity ("" not set).
	stepUp string
	// reviewer is the automated first reviewer (nil: not set).
	reviewer *reviewerSpec
	// notify is the staggered notification, set when its key is.
	notify    []contracts.NotifyStage
	notifySet bool
	// reminders and escalation are set when their key is (an empty list
	// included: it turns off what a lower layer sets).
	reminders     []time.Duration
	reminderNodes []*yaml.Node
	remindersSet  bool
	escalation    []*tierSpec
	escalationKey *yaml.Node // nil when escalation is not set
	repeat        int
	repeatNode    *yaml.Node // nil when escalation_repeat is not set
	// repeatApplied: some decision takes its escalation_repeat from here;
	// repeatUseful: one that has escalation tiers to repeat.
	repeatApplied, repeatUseful bool
	// set lists the gate fields the file sets, for warnings.
	set []field

	// resolved approvers, filled when compiling.
	resolved   []string
	unresolved bool // an approver group is not defined in the policy
}

// tierSpec is one tier of an escalation ladder.
type tierSpec struct {
	index         int // in the file's list
	after         time.Duration
	afterNode     *yaml.Node
	approvers     []string
	approverNodes []*yaml.Node
	channels      []string

	// resolved approvers, filled when compiling.
	resolved   []string
	unresolved bool
}

// ruleSpec is one entry of rules.
type ruleSpec struct {
	gateSpec
	index                  int
	name                   string
	line, col              int
	agents, tools, tenants []string
	labels                 map[string]string
	when                   string
	whenNode               *yaml.Node
	action                 string
	// receipt asks the HTTP API to sign a receipt for calls the rule
	// allows (receipt: true); receiptKey is where it was set.
	receipt    bool
	receiptKey *yaml.Node
	// shadow: the rule is evaluated and recorded, never enforced (mode:
	// shadow).
	shadow bool
}

// Rule modes.
const (
	ModeEnforce = "enforce"
	ModeShadow  = "shadow"
)

func readPolicy(root *yaml.Node, ps *problems) *fileSpec {
	fs := &fileSpec{}
	fs.defaultRule.where = "default_rule"
	for _, f := range ps.fields(root, "the policy") {
		switch f.name() {
		case "version":
			fs.version = strings.TrimSpace(ps.str(f.val, "version"))
		case "default":
			fs.def, fs.defNode = ps.str(f.val, "default"), f.val
		case "default_rule":
			readDefaultRule(f.val, &fs.defaultRule, ps)
		case "groups":
			fs.groups = readGroups(f.val, ps)
		case "risk_defaults":
			fs.riskDefault = readRiskDefaults(f.val, ps)
		case "rules":
			fs.rules = readRules(f.val, ps)
		default:
			ps.unknownField(f, "the policy", topKeys)
		}
	}
	if fs.def == "" {
		fs.def = ActionRequireApproval
	} else if !validAction(fs.def) {
		ps.add(fs.defNode.Line, fs.defNode.Column, SeverityError, "default: unknown action %q (allow, deny, require_approval)", fs.def)
	}
	return fs
}

func readDefaultRule(n *yaml.Node, g *gateSpec, ps *problems) {
	g.node = n
	for _, f := range ps.fields(n, "default_rule") {
		switch f.name() {
		case "name":
			ps.add(f.key.Line, f.key.Column, SeverityError, "default_rule: name cannot be set (calls no rule matches report rule %q)", defaultRuleName)
		case "tools", "agents", "tenants", "labels", "when":
			ps.add(f.key.Line, f.key.Column, SeverityError, "default_rule: %s cannot be set (default_rule applies to calls no rule matches)", f.name())
		case "action":
			ps.add(f.key.Line, f.key.Column, SeverityError, "default_rule: action cannot be set (use the top-level default)")
		default:
			if !readGateField(f, g, ps, gateKeys) {
				ps.unknownField(f, "default_rule", gateKeys)
			}
		}
	}
}

func readGroups(n *yaml.Node, ps *problems) map[string][]string {
	groups := map[string][]string{}
	for _, f := range ps.fields(n, "groups") {
		name := f.name()
		what := "groups." + name
		if name == "" || strings.ContainsAny(name, " \t\n") || strings.HasPrefix(name, groupPrefix) {
			ps.add(f.key.Line, f.key.Column, SeverityError, "groups: %q is not a valid group name", name)
			continue
		}
		members, nodes := ps.strList(f.val, what)
		seen := map[string]bool{}
		var uniq []string
		for i, m := range members {
			switch {
			case strings.HasPrefix(m, groupPrefix):
				ps.add(nodes[i].Line, nodes[i].Column, SeverityError, "%s: %q: a group lists users, not other groups", what, m)
			case strings.TrimSpace(m) != m:
				ps.add(nodes[i].Line, nodes[i].Column, SeverityError, "%s: %q has leading or trailing space", what, m)
			case seen[m]:
				ps.add(nodes[i].Line, nodes[i].Column, SeverityWarning, "%s: %q is listed twice", what, m)
			default:
				seen[m] = true
				uniq = append(uniq, m)
			}
		}
		if len(members) == 0 {
			ps.add(f.val.Line, f.val.Column, SeverityError, "%s has no members", what)
		}
		groups[name] = uniq
	}
	return groups
}

func readRiskDefaults(n *yaml.Node, ps *problems) map[string]*gateSpec {
	out := map[string]*gateSpec{}
	for _, f := range ps.fields(n, "risk_defaults") {
		risk := f.name()
		if !validRisk(risk) {
			ps.add(f.key.Line, f.key.Column, SeverityError, "risk_defaults: unknown risk %q (low, medium, high, critical)", risk)
			continue
		}
		g := &gateSpec{where: "risk_defaults." + risk, node: f.val}
		for _, gf := range ps.fields(f.val, g.where) {
			if !readGateField(gf, g, ps, riskDefaultKeys) {
				ps.unknownField(gf, g.where, riskDefaultKeys)
			}
		}
		out[risk] = g
	}
	return out
}

func readRules(n *yaml.Node, ps *problems) []*ruleSpec {
	seq := resolve(n)
	if isNull(seq) {
		return nil
	}
	if seq.Kind != yaml.SequenceNode {
		ps.add(n.Line, n.Column, SeverityError, "rules must be a list of rules")
		return nil
	}
	var rules []*ruleSpec
	names := map[string]*ruleSpec{}
	for i, item := range seq.Content {
		r := readRule(i, item, ps)
		if r == nil {
			continue
		}
		switch first := names[r.name]; {
		case r.name == "":
		case first != nil:
			ps.add(r.line, r.col, SeverityError, "rules[%d]: duplicate rule name %q (first on line %d)", i, r.name, first.line)
		default:
			names[r.name] = r
		}
		rules = append(rules, r)
	}
	return rules
}

func readRule(i int, n *yaml.Node, ps *problems) *ruleSpec {
	r := &ruleSpec{index: i, line: n.Line, col: n.Column}
	r.where = "rules[" + itoa(i) + "]"
	r.node = n
	m := resolve(n)
	if m.Kind != yaml.MappingNode {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a mapping with name, tools, action, ...", r.where)
		return nil
	}
	fs := ps.fields(n, r.where)
	// The name first, so that every later message can say which rule.
	for _, f := range fs {
		if f.name() == "name" {
			r.name = strings.TrimSpace(ps.str(f.val, r.where+".name"))
			switch {
			case r.name == "":
			case r.name == defaultRuleName:
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s: the rule name %q is reserved for calls no rule matches", r.where, r.name)
			default:
				r.where = "rule " + quote(r.name)
			}
		}
	}
	if r.name == "" {
		ps.add(r.line, r.col, SeverityError, "%s: name is required (it is recorded on every request the rule decides)", r.where)
	}
	for _, f := range fs {
		what := r.where + ": " + f.name()
		switch f.name() {
		case "name":
		case "agents":
			r.agents = globList(f, what, ps)
		case "tools":
			r.tools = globList(f, what, ps)
		case "tenants":
			r.tenants = globList(f, what, ps)
		case "labels":
			r.labels, _ = ps.strMap(f.val, what)
		case "when":
			r.when, r.whenNode = ps.str(f.val, what), resolve(f.val)
			if strings.TrimSpace(r.when) == "" && !isNull(f.val) {
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s is empty", what)
			}
		case "action":
			r.action = ps.str(f.val, what)
			if !validAction(r.action) {
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s: unknown action %q (allow, deny, require_approval)", r.where, r.action)
			}
		case "receipt":
			r.receipt, _ = ps.boolean(f.val, what)
			r.receiptKey = f.key
		case "mode":
			r.shadow = readMode(f, what, r.where, ps)
		default:
			if !readGateField(f, &r.gateSpec, ps, gateKeys) {
				ps.unknownField(f, r.where, ruleKeys)
			}
		}
	}
	if !hasKey(fs, "action") {
		ps.add(r.line, r.col, SeverityError, "%s: action is required (allow, deny, require_approval)", r.where)
	}
	if len(r.tools) == 0 && len(r.agents) == 0 && len(r.tenants) == 0 && len(r.labels) == 0 && r.when == "" {
		ps.add(r.line, r.col, SeverityError, "%s matches nothing in particular: set tools (tools: [\"*\"] for every tool), agents, tenants, labels or when", r.where)
	}
	return r
}

// readMode reads a rule's mode and reports whether it is shadow.
func readMode(f field, what, where string, ps *problems) bool {
	switch m := ps.str(f.val, what); m {
	case ModeEnforce:
	case ModeShadow:
		return true
	default:
		ps.add(f.val.Line, f.val.Column, SeverityError, "%s: unknown mode %q (enforce, shadow)", where, m)
	}
	return false
}

// globList reads a list of globs.
func globList(f field, what string, ps *problems) []string {
	globs, nodes := ps.strList(f.val, what)
	out := globs[:0:0]
	for j, g := range globs {
		if err := checkGlob(g); err != nil {
			ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s[%d]: %v", what, j, err)
			continue
		}
		out = append(out, g)
	}
	if len(globs) == 0 && !isNull(f.val) && resolve(f.val).Kind == yaml.SequenceNode {
		ps.add(f.val.Line, f.val.Column, SeverityError, "%s is an empty list; leave it out to match everything", what)
	}
	return out
}

// readGateField reads one gate setting named in allowed; it reports false
// when f is not one.
func readGateField(f field, g *gateSpec, ps *problems, allowed []string) bool {
	if !slices.Contains(allowed, f.name()) {
		return false
	}
	g.set = append(g.set, f)
	if read := gateFieldReaders[f.name()]; read != nil {
		read(g, f, g.where+": "+f.name(), ps)
	}
	return true
}

// gateFieldReaders read each gate setting into g; what names the setting
// in problems.
var gateFieldReaders = map[string]func(g *gateSpec, f field, what string, ps *problems){
	"risk": readRiskField,
	"approvers": func(g *gateSpec, f field, what string, ps *problems) {
		g.approvers, g.approverNodes = readApprovers(f.val, what, ps)
	},
	"quorum": readQuorumField,
	"veto": func(g *gateSpec, f field, what string, ps *problems) {
		if b, ok := ps.boolean(f.val, what); ok {
			g.veto = &b
		}
	},
	"allow_self_approval": func(g *gateSpec, f field, what string, ps *problems) {
		if b, ok := ps.boolean(f.val, what); ok {
			g.selfApproval = &b
		}
	},
	"order": readOrderField,
	"channels": func(g *gateSpec, f field, what string, ps *problems) {
		g.channels = readChannels(f.val, what, g.where, ps)
	},
	"notify": readNotifyField,
	"timeout": func(g *gateSpec, f field, what string, ps *problems) {
		g.timeout, _ = ps.duration(f.val, what)
	},
	"on_timeout": readOnTimeoutField,
	"step_up": func(g *gateSpec, f field, what string, ps *problems) {
		s := ps.str(f.val, what)
		if s != contracts.StepUpPasskey {
			ps.add(f.val.Line, f.val.Column, SeverityError, "%s: step_up %q is not passkey (the only step-up there is)", g.where, s)
			return
		}
		g.stepUp = s
	},
	"claim_within": func(g *gateSpec, f field, what string, ps *problems) {
		if d, ok := ps.duration(f.val, what); ok {
			if d < time.Second || d > MaxClaimWithin {
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s: claim_within %s must be between 1s and %s", g.where, d, MaxClaimWithin)
				return
			}
			g.claimWithin = d
		}
	},
	"allowed_decisions": readAllowedDecisionsField,
	"summary": func(g *gateSpec, f field, what string, ps *problems) {
		g.summary = ps.str(f.val, what)
	},
	"reason": func(g *gateSpec, f field, what string, ps *problems) {
		g.reason = ps.str(f.val, what)
	},
	"sensitive": func(g *gateSpec, f field, what string, ps *problems) {
		g.sensitive = readSensitive(f.val, what, ps)
	},
	"sensitive_fields": func(g *gateSpec, f field, what string, ps *problems) {
		g.sensitiveFields = readSensitiveFields(f.val, what, ps)
	},
	"reminders": func(g *gateSpec, f field, what string, ps *problems) {
		g.reminders, g.reminderNodes, g.remindersSet = readReminders(f.val, what, ps)
	},
	"escalation": func(g *gateSpec, f field, what string, ps *problems) {
		var set bool
		if g.escalation, set = readEscalation(f.val, what, ps); set {
			g.escalationKey = f.key
		}
	},
	"escalation_repeat": readEscalationRepeatField,
	"grants":            readGrantsField,
	"reviewer":          readReviewerField,
}

func readRiskField(g *gateSpec, f field, what string, ps *problems) {
	v := f.val
	g.risk = ps.str(v, what)
	if !validRisk(g.risk) {
		ps.add(v.Line, v.Column, SeverityError, "%s: unknown risk %q (low, medium, high, critical)", g.where, g.risk)
		g.risk = ""
	}
}

func readQuorumField(g *gateSpec, f field, what string, ps *problems) {
	v := f.val
	if q, ok := ps.integer(v, what); ok {
		if q < 1 {
			ps.add(v.Line, v.Column, SeverityError, "%s: quorum %d must be at least 1", g.where, q)
		} else {
			g.quorum, g.quorumNode = q, v
		}
	}
}

func readOrderField(g *gateSpec, f field, what string, ps *problems) {
	v := f.val
	g.order = ps.str(v, what)
	switch g.order {
	case "", contracts.OrderAny, contracts.OrderSequence:
	default:
		ps.add(v.Line, v.Column, SeverityError, "%s: order %q: must be any or sequence", g.where, g.order)
		g.order = ""
	}
}

func readOnTimeoutField(g *gateSpec, f field, what string, ps *problems) {
	v := f.val
	g.onTimeout = ps.str(v, what)
	switch g.onTimeout {
	case "", contracts.OnTimeoutReject, contracts.OnTimeoutApprove:
	default:
		ps.add(v.Line, v.Column, SeverityError, "%s: on_timeout %q: must be reject or approve", g.where, g.onTimeout)
		g.onTimeout = ""
	}
}

func readAllowedDecisionsField(g *gateSpec, f field, what string, ps *problems) {
	list, nodes := ps.strList(f.val, what)
	for j, d := range list {
		switch d {
		case contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond:
			if slices.Contains(g.allowed, d) {
				ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s: %q is listed twice", what, d)
				continue
			}
			g.allowed = append(g.allowed, d)
		default:
			ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s: unknown decision %q in allowed_decisions (approve, reject, edit, respond)", g.where, d)
		}
	}
}

func readEscalationRepeatField(g *gateSpec, f field, what string, ps *problems) {
	v := f.val
	if n, ok := ps.integer(v, what); ok {
		if n < 0 || n > maxEscalationRepeat {
			ps.add(v.Line, v.Column, SeverityError, "%s: escalation_repeat %d: must be 0 to %d", g.where, n, maxEscalationRepeat)
		} else {
			g.repeat, g.repeatNode = n, v
		}
	}
}

// readApprovers reads a list of approvers: user ids and "group:NAME".
func readApprovers(v *yaml.Node, what string, ps *problems) ([]string, []*yaml.Node) {
	list, nodes := ps.strList(v, what)
	var out []string
	var outNodes []*yaml.Node
	seen := map[string]bool{}
	for j, a := range list {
		switch {
		case strings.TrimSpace(a) != a:
			ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s[%d]: %q has leading or trailing space", what, j, a)
		case a == groupPrefix:
			ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s[%d]: group name missing after %q", what, j, groupPrefix)
		case seen[a]:
			ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s[%d]: %q is listed twice", what, j, a)
		default:
			seen[a] = true
			out = append(out, a)
			outNodes = append(outNodes, nodes[j])
		}
	}
	return out, outNodes
}

// readChannels reads a list of notification routes; where prefixes the
// route's own error.
func readChannels(v *yaml.Node, what, where string, ps *problems) []string {
	list, nodes := ps.strList(v, what)
	var out []string
	for j, c := range list {
		if _, err := contracts.ParseRoute(c); err != nil {
			ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s: %v", where, err)
			continue
		}
		out = append(out, c)
	}
	return out
}

// readReminders reads a strictly increasing list of positive durations. It
// reports whether the file sets the list (an empty list does; null does not).
func readReminders(v *yaml.Node, what string, ps *problems) ([]time.Duration, []*yaml.Node, bool) {
	seq := resolve(v)
	if isNull(seq) {
		return nil, nil, false
	}
	if seq.Kind != yaml.SequenceNode {
		ps.add(v.Line, v.Column, SeverityError, "%s must be a list of durations, such as [10m, 1h]", what)
		return nil, nil, false
	}
	out := []time.Duration{}
	var nodes []*yaml.Node
	for i, item := range seq.Content {
		if i == maxReminders {
			ps.add(item.Line, item.Column, SeverityError, "%s: at most %d reminders", what, maxReminders)
			break
		}
		itemWhat := what + "[" + itoa(i) + "]"
		d, ok := ps.duration(item, itemWhat)
		if !ok {
			continue
		}
		if n := len(out); n > 0 && d <= out[n-1] {
			ps.add(item.Line, item.Column, SeverityError, "%s: %s is not after the reminder before it (%s); list reminders in increasing order",
				itemWhat, resolve(item).Value, shortDuration(out[n-1]))
			continue
		}
		out = append(out, d)
		nodes = append(nodes, item)
	}
	return out, nodes, true
}

// readEscalation reads the tiers of an escalation ladder. It reports
// whether the file sets the ladder (an empty list does; null does not).
func readEscalation(v *yaml.Node, what string, ps *problems) ([]*tierSpec, bool) {
	seq := resolve(v)
	if isNull(seq) {
		return nil, false
	}
	if seq.Kind != yaml.SequenceNode {
		ps.add(v.Line, v.Column, SeverityError, "%s must be a list of tiers, each with after and approvers", what)
		return nil, false
	}
	tiers := []*tierSpec{}
	var last time.Duration
	for i, item := range seq.Content {
		if i == maxEscalationTiers {
			ps.add(item.Line, item.Column, SeverityError, "%s: at most %d tiers", what, maxEscalationTiers)
			break
		}
		tierWhat := what + "[" + itoa(i) + "]"
		t, ok := readTier(item, tierWhat, ps)
		if t != nil {
			t.index = i
		}
		if t != nil && t.after > 0 {
			if t.after <= last {
				ps.add(t.afterNode.Line, t.afterNode.Column, SeverityError, "%s.after: %s is not after the tier before it (%s); list tiers in increasing order",
					tierWhat, resolve(t.afterNode).Value, shortDuration(last))
				ok = false
			} else {
				last = t.after
			}
		}
		if ok {
			tiers = append(tiers, t)
		}
	}
	return tiers, true
}

// readTier reads one escalation tier; it reports false when the tier has a
// problem (the tier, if not nil, holds what could be read).
func readTier(n *yaml.Node, what string, ps *problems) (*tierSpec, bool) {
	if resolve(n).Kind != yaml.MappingNode {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a mapping with after and approvers", what)
		return nil, false
	}
	t := &tierSpec{}
	ok := true
	fs := ps.fields(n, what)
	for _, f := range fs {
		fieldWhat := what + "." + f.name()
		switch f.name() {
		case "after":
			var good bool
			t.after, good = ps.duration(f.val, fieldWhat)
			t.afterNode, ok = f.val, ok && good
		case "approvers":
			t.approvers, t.approverNodes = readApprovers(f.val, fieldWhat, ps)
			if r := resolve(f.val); isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0 {
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s is empty: a tier adds at least one approver", fieldWhat)
			}
			ok = ok && len(t.approvers) > 0
		case "channels":
			t.channels = readChannels(f.val, fieldWhat, what, ps)
		default:
			ps.unknownField(f, what, tierKeys)
			ok = false
		}
	}
	if !hasKey(fs, "after") {
		ps.add(n.Line, n.Column, SeverityError, "%s: after is required (how long after the request was created, such as 2h)", what)
		ok = false
	}
	if !hasKey(fs, "approvers") {
		ps.add(n.Line, n.Column, SeverityError, "%s: approvers is required (who may approve from then on)", what)
		ok = false
	}
	return t, ok
}

func validAction(a string) bool {
	return a == ActionAllow || a == ActionDeny || a == ActionRequireApproval
}

func validRisk(r string) bool {
	switch r {
	case contracts.RiskLow, contracts.RiskMedium, contracts.RiskHigh, contracts.RiskCritical:
		return true
	}
	return false
}

// riskRank orders the risk tiers.
func riskRank(r string) int {
	switch r {
	case contracts.RiskLow:
		return 1
	case contracts.RiskMedium:
		return 2
	case contracts.RiskHigh:
		return 3
	case contracts.RiskCritical:
		return 4
	}
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }

func quote(s string) string { return strconv.Quote(s) }
