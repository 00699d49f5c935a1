package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// Case is one row of a policy test table: a tool call and what the policy
// must decide about it.
type Case struct {
	Name      string
	Run       contracts.Run
	Tool      string
	Arguments json.RawMessage
	Expect    Expect
	// Line is where the case starts in its file.
	Line int
}

// Expect is what a case expects; empty fields are not checked.
type Expect struct {
	Action string
	Rule   string
	Risk   string
	// Error, when set, must appear in Decision.Error: the case expects a
	// condition to fail (and the call to gate).
	Error string
}

// CaseResult is how one case went.
type CaseResult struct {
	Case  Case
	Got   Decision
	Steps []Step
	Pass  bool
	// Diff says what differed, one "field: got X, want Y" per line; empty
	// when the case passed.
	Diff string
	// Shadow is what the policy's shadow rules would have decided (see
	// EvaluateShadow); cases are held to the enforced decision only.
	Shadow []ShadowVerdict
}

var (
	caseKeys   = []string{"name", "agent", "tenant", "labels", "run", "tool", "args", "expect"}
	runKeys    = []string{"id", "thread_id", "agent", "requested_by", "owner", "tenant", "labels"}
	expectKeys = []string{"action", "rule", "risk", "error"}
)

// ParseCases reads a policy test table: a YAML list of cases, each
//
//   - name: big payments need finance
//     agent: billing-bot          # shorthand for run.agent
//     tenant: prod                # shorthand for run.tenant
//     labels: {env: prod}         # shorthand for run.labels
//     run: {id: r1, requested_by: alice, owner: bob}
//     tool: payments.send
//     args: {amount: 250, recipient: ACME}
//     expect: {action: require_approval, rule: big-payments, risk: high}
//
// Unknown fields are errors; the error is an *Errors with every problem's
// line.
func ParseCases(data []byte) ([]Case, error) {
	var ps problems
	root := readDocument(data, &ps, "write a list of cases, each with tool and expect")
	var cases []Case
	if root != nil {
		seq := resolve(root)
		if seq.Kind != yaml.SequenceNode {
			ps.add(root.Line, root.Column, SeverityError, "the cases must be a list (each item: name, tool, args, expect)")
		} else {
			if len(seq.Content) == 0 {
				ps.add(root.Line, root.Column, SeverityError, "the list of cases is empty")
			}
			for i, item := range seq.Content {
				if c, ok := readCase(i, item, &ps); ok {
					cases = append(cases, c)
				}
			}
		}
	}
	if errs := ps.errors(); len(errs) > 0 {
		return nil, &Errors{Problems: errs}
	}
	return cases, nil
}

func readCase(i int, n *yaml.Node, ps *problems) (Case, bool) {
	c := Case{Line: n.Line}
	where := "cases[" + itoa(i) + "]"
	if resolve(n).Kind != yaml.MappingNode {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a mapping with name, tool, args and expect", where)
		return c, false
	}
	fs := ps.fields(n, where)
	// The name first, so that every later message can say which case, and
	// the shorthands, so that run: can refuse to set them again.
	var short struct {
		agent, tenant, labels *yaml.Node
	}
	for _, f := range fs {
		switch f.name() {
		case "name":
			c.Name = ps.str(f.val, where+".name")
			if c.Name != "" {
				where = "case " + quote(c.Name)
			}
		case "agent":
			short.agent = f.key
		case "tenant":
			short.tenant = f.key
		case "labels":
			short.labels = f.key
		}
	}
	var expectNode *yaml.Node
	for _, f := range fs {
		what := where + ": " + f.name()
		switch f.name() {
		case "name":
		case "agent":
			c.Run.Agent = ps.str(f.val, what)
		case "tenant":
			c.Run.Tenant = ps.str(f.val, what)
		case "labels":
			c.Run.Labels, _ = ps.strMap(f.val, what)
		case "run":
			readCaseRun(f.val, &c.Run, where, ps, short.agent, short.tenant, short.labels)
		case "tool":
			c.Tool = ps.str(f.val, what)
		case "args":
			c.Arguments = caseArgs(f.val, what, ps)
		case "expect":
			expectNode = f.val
			c.Expect = readExpect(f.val, what, ps)
		default:
			ps.unknownField(f, where, caseKeys)
		}
	}
	if c.Tool == "" {
		ps.add(n.Line, n.Column, SeverityError, "%s: tool is required", where)
	}
	if expectNode == nil || c.Expect == (Expect{}) {
		ps.add(n.Line, n.Column, SeverityError, "%s: expect must name at least one of action, rule, risk, error", where)
	}
	if c.Arguments == nil {
		c.Arguments = json.RawMessage(`{}`)
	}
	if c.Name == "" {
		c.Name = fmt.Sprintf("%s (line %d)", c.Tool, c.Line)
	}
	return c, true
}

// readCaseRun reads run:, refusing a field also given by its shorthand.
func readCaseRun(n *yaml.Node, r *contracts.Run, where string, ps *problems, agent, tenant, labels *yaml.Node) {
	where += ": run"
	twice := func(f field, short *yaml.Node) bool {
		if short != nil {
			ps.add(f.key.Line, f.key.Column, SeverityError, "%s.%s: also given as %s on line %d; give it once", where, f.name(), f.name(), short.Line)
			return true
		}
		return false
	}
	for _, f := range ps.fields(n, where) {
		what := where + "." + f.name()
		switch f.name() {
		case "id":
			r.ID = ps.str(f.val, what)
		case "thread_id":
			r.ThreadID = ps.str(f.val, what)
		case "agent":
			if !twice(f, agent) {
				r.Agent = ps.str(f.val, what)
			}
		case "requested_by":
			r.RequestedBy = ps.str(f.val, what)
		case "owner":
			r.Owner = ps.str(f.val, what)
		case "tenant":
			if !twice(f, tenant) {
				r.Tenant = ps.str(f.val, what)
			}
		case "labels":
			if !twice(f, labels) {
				r.Labels, _ = ps.strMap(f.val, what)
			}
		default:
			ps.unknownField(f, where, runKeys)
		}
	}
}

func readExpect(n *yaml.Node, where string, ps *problems) Expect {
	var e Expect
	for _, f := range ps.fields(n, where) {
		what := where + "." + f.name()
		switch f.name() {
		case "action":
			e.Action = ps.str(f.val, what)
			if e.Action != "" && !validAction(e.Action) {
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s: unknown action %q (allow, deny, require_approval)", what, e.Action)
			}
		case "rule":
			e.Rule = ps.str(f.val, what)
		case "risk":
			e.Risk = ps.str(f.val, what)
			if e.Risk != "" && !validRisk(e.Risk) {
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s: unknown risk %q (low, medium, high, critical)", what, e.Risk)
			}
		case "error":
			e.Error = ps.str(f.val, what)
		default:
			ps.unknownField(f, where, expectKeys)
		}
	}
	return e
}

// caseArgs turns the YAML mapping of a case's arguments into JSON.
func caseArgs(n *yaml.Node, what string, ps *problems) json.RawMessage {
	if isNull(n) {
		return nil
	}
	if resolve(n).Kind != yaml.MappingNode {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a mapping (the tool's arguments as a YAML object)", what)
		return nil
	}
	budget := 100000 // nodes, so that nested aliases cannot blow up
	v, ok := yamlToJSON(n, what, ps, 0, &budget)
	if !ok {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		ps.add(n.Line, n.Column, SeverityError, "%s: %v", what, err)
		return nil
	}
	return data
}

func yamlToJSON(n *yaml.Node, what string, ps *problems, depth int, budget *int) (any, bool) {
	*budget--
	if depth > 100 || *budget < 0 {
		ps.add(n.Line, n.Column, SeverityError, "%s: too deeply nested or too large", what)
		return nil, false
	}
	r := resolve(n)
	switch r.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for _, f := range ps.fields(n, what) {
			v, ok := yamlToJSON(f.val, what+"."+f.name(), ps, depth+1, budget)
			if !ok {
				return nil, false
			}
			m[f.name()] = v
		}
		return m, true
	case yaml.SequenceNode:
		l := make([]any, 0, len(r.Content))
		for i, c := range r.Content {
			v, ok := yamlToJSON(c, what+"["+itoa(i)+"]", ps, depth+1, budget)
			if !ok {
				return nil, false
			}
			l = append(l, v)
		}
		return l, true
	case yaml.ScalarNode:
		switch r.Tag {
		case "!!null":
			return nil, true
		case "!!bool":
			var b bool
			if r.Decode(&b) == nil {
				return b, true
			}
		case "!!int":
			var i int64
			if r.Decode(&i) == nil {
				return i, true
			}
			var u uint64
			if r.Decode(&u) == nil {
				return u, true
			}
		case "!!float":
			var f float64
			if r.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
			ps.add(n.Line, n.Column, SeverityError, "%s: %s is not a JSON number", what, r.Value)
			return nil, false
		default: // strings, timestamps, binary: the text as written
			return r.Value, true
		}
		ps.add(n.Line, n.Column, SeverityError, "%s: cannot read %q", what, r.Value)
		return nil, false
	}
	ps.add(n.Line, n.Column, SeverityError, "%s: unsupported YAML value", what)
	return nil, false
}

// RunCases decides every case with p and compares with what it expects.
func RunCases(p *Policy, cases []Case) []CaseResult {
	rules := map[string]bool{defaultRuleName: true}
	for _, n := range p.RuleNames() {
		rules[n] = true
	}
	out := make([]CaseResult, 0, len(cases))
	for _, c := range cases {
		in := Input{Run: c.Run, Tool: c.Tool, Arguments: c.Arguments}
		d, steps := p.Explain(in)
		_, shadow := p.EvaluateShadow(context.Background(), in)
		var diff []string
		check := func(field, got, want string) {
			if want != "" && got != want {
				diff = append(diff, fmt.Sprintf("%s: got %s, want %s", field, show(got), want))
			}
		}
		check("action", d.Action, c.Expect.Action)
		check("rule", d.Rule, c.Expect.Rule)
		if c.Expect.Rule != "" && !rules[c.Expect.Rule] {
			diff[len(diff)-1] += fmt.Sprintf(" (the policy has no rule %q)", c.Expect.Rule)
		}
		if c.Expect.Risk != "" && d.Action == ActionRequireApproval {
			check("risk", d.Risk, c.Expect.Risk)
		} else if c.Expect.Risk != "" {
			diff = append(diff, fmt.Sprintf("risk: got none (the call is not gated: %s), want %s", d.Action, c.Expect.Risk))
		}
		if c.Expect.Error != "" && !strings.Contains(d.Error, c.Expect.Error) {
			diff = append(diff, fmt.Sprintf("error: got %s, want one containing %q", show(d.Error), c.Expect.Error))
		}
		out = append(out, CaseResult{Case: c, Got: d, Steps: steps, Pass: len(diff) == 0, Diff: strings.Join(diff, "\n"), Shadow: shadow})
	}
	return out
}
