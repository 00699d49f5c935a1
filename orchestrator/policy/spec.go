package policy

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// This file reads a policy file into specs: what the file says, checked
// field by field, before rules are compiled.

// Field names of the file.
var (
	topKeys  = []string{"version", "default", "default_rule", "groups", "risk_defaults", "rules"}
	gateKeys = []string{"risk", "approvers", "quorum", "veto", "allow_self_approval", "order",
		"channels", "timeout", "on_timeout", "allowed_decisions", "summary", "reason"}
	riskDefaultKeys = []string{"approvers", "quorum", "veto", "allow_self_approval", "order",
		"channels", "timeout", "on_timeout", "allowed_decisions"}
	matchKeys = []string{"name", "agents", "tools", "tenants", "labels", "when", "action"}
	ruleKeys  = append(append([]string{}, matchKeys...), gateKeys...)
)

// groupPrefix marks an approver entry that names a group.
const groupPrefix = "group:"

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
	// set lists the gate fields the file sets, for warnings.
	set []field

	// resolved approvers, filled when compiling.
	resolved   []string
	unresolved bool // an approver group is not defined in the policy
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
}

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
	what := g.where + ": " + f.name()
	v := f.val
	switch f.name() {
	case "risk":
		g.risk = ps.str(v, what)
		if !validRisk(g.risk) {
			ps.add(v.Line, v.Column, SeverityError, "%s: unknown risk %q (low, medium, high, critical)", g.where, g.risk)
			g.risk = ""
		}
	case "approvers":
		list, nodes := ps.strList(v, what)
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
				g.approvers = append(g.approvers, a)
				g.approverNodes = append(g.approverNodes, nodes[j])
			}
		}
	case "quorum":
		if q, ok := ps.integer(v, what); ok {
			if q < 1 {
				ps.add(v.Line, v.Column, SeverityError, "%s: quorum %d must be at least 1", g.where, q)
			} else {
				g.quorum, g.quorumNode = q, v
			}
		}
	case "veto":
		if b, ok := ps.boolean(v, what); ok {
			g.veto = &b
		}
	case "allow_self_approval":
		if b, ok := ps.boolean(v, what); ok {
			g.selfApproval = &b
		}
	case "order":
		g.order = ps.str(v, what)
		switch g.order {
		case "", contracts.OrderAny, contracts.OrderSequence:
		default:
			ps.add(v.Line, v.Column, SeverityError, "%s: order %q: must be any or sequence", g.where, g.order)
			g.order = ""
		}
	case "channels":
		list, nodes := ps.strList(v, what)
		for j, c := range list {
			if _, err := notifier.ParseRoute(c); err != nil {
				ps.add(nodes[j].Line, nodes[j].Column, SeverityError, "%s: %v", g.where, err)
				continue
			}
			g.channels = append(g.channels, c)
		}
	case "timeout":
		g.timeout, _ = ps.duration(v, what)
	case "on_timeout":
		g.onTimeout = ps.str(v, what)
		switch g.onTimeout {
		case "", contracts.OnTimeoutReject, contracts.OnTimeoutApprove:
		default:
			ps.add(v.Line, v.Column, SeverityError, "%s: on_timeout %q: must be reject or approve", g.where, g.onTimeout)
			g.onTimeout = ""
		}
	case "allowed_decisions":
		list, nodes := ps.strList(v, what)
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
	case "summary":
		g.summary = ps.str(v, what)
	case "reason":
		g.reason = ps.str(v, what)
	}
	return true
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
