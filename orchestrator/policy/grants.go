package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// This file reads a rule's `grants` setting, which standing grants an
// approver may give when approving a call the rule gates:
//
//	grants: {scopes: [call, run, agent], max_ttl: 8h, arguments: condition}
//
// Without it only the call is approved, as always.

var grantKeys = []string{"scopes", "max_ttl", "arguments"}

// grantsSpec is a rule's grants setting as read.
type grantsSpec struct {
	limits contracts.GrantLimits
}

func readGrantsField(g *gateSpec, f field, what string, ps *problems) {
	gs := &grantsSpec{limits: contracts.GrantLimits{Arguments: contracts.GrantArgumentsSame}}
	for _, sf := range ps.fields(f.val, what) {
		switch sf.name() {
		case "scopes":
			scopes, nodes := ps.strList(sf.val, what+".scopes")
			for i, s := range scopes {
				switch {
				case s != contracts.GrantScopeCall && s != contracts.GrantScopeRun && s != contracts.GrantScopeAgent:
					ps.add(nodes[i].Line, nodes[i].Column, SeverityError, "%s: unknown grant scope %q (call, run, agent)", g.where, s)
				case slices.Contains(gs.limits.Scopes, s):
					ps.add(nodes[i].Line, nodes[i].Column, SeverityWarning, "%s: grant scope %q is listed twice", g.where, s)
				default:
					gs.limits.Scopes = append(gs.limits.Scopes, s)
				}
			}
		case "max_ttl":
			d, ok := ps.duration(sf.val, what+".max_ttl")
			if ok && d <= 0 {
				ps.add(sf.val.Line, sf.val.Column, SeverityError, "%s: grants.max_ttl must be positive", g.where)
			}
			if d > 0 {
				gs.limits.MaxTTL = d.String()
			}
		case "arguments":
			a := ps.str(sf.val, what+".arguments")
			if a != contracts.GrantArgumentsSame && a != contracts.GrantArgumentsCondition {
				ps.add(sf.val.Line, sf.val.Column, SeverityError, "%s: grants.arguments must be same or condition, not %q", g.where, a)
			} else {
				gs.limits.Arguments = a
			}
		default:
			ps.unknownField(sf, what, grantKeys)
		}
	}
	if len(gs.limits.Scopes) == 0 {
		gs.limits.Scopes = []string{contracts.GrantScopeCall}
	}
	wider := slices.ContainsFunc(gs.limits.Scopes, func(s string) bool { return s != contracts.GrantScopeCall })
	if wider && gs.limits.MaxTTL == "" {
		ps.add(f.key.Line, f.key.Column, SeverityError, "%s: grants needs max_ttl when it permits run or agent", g.where)
	}
	if gs.limits.MaxTTL == "" {
		gs.limits.MaxTTL = "1s" // permits nothing wider than the call anyway
	}
	g.grants = gs
}

// limitsOf is the grants setting of a decision: nil when it permits only
// the call.
func limitsOf(gs *grantsSpec) *contracts.GrantLimits {
	if gs == nil || !slices.ContainsFunc(gs.limits.Scopes, func(s string) bool { return s != contracts.GrantScopeCall }) {
		return nil
	}
	l := gs.limits
	l.Scopes = slices.Clone(l.Scopes)
	return &l
}

// checkGrants requires a request's grants to be within the rule's: no
// scope the rule does not list, no longer max_ttl, no condition where the
// rule permits the same arguments only.
func checkGrants(req *contracts.ApprovalRequested, d Decision) []string {
	got := req.Grants
	if got == nil {
		return nil
	}
	if req.Kind == contracts.KindHumanInput {
		return []string{"grants on a question: nothing can be granted beyond an answer"}
	}
	if why := approval.GrantLimitsValid(got); why != "" {
		return []string{why}
	}
	want := d.Grants
	if want == nil {
		return []string{"grants where the rule permits no grant"}
	}
	var ps []string
	for _, s := range got.Scopes {
		if !slices.Contains(want.Scopes, s) {
			ps = append(ps, fmt.Sprintf("grants.scopes lists %q, which the rule does not permit", s))
		}
	}
	g, _ := time.ParseDuration(got.MaxTTL)
	w, _ := time.ParseDuration(want.MaxTTL)
	if g > w {
		ps = append(ps, fmt.Sprintf("grants.max_ttl %s is longer than the rule's %s", g, w))
	}
	if got.Arguments == contracts.GrantArgumentsCondition && want.Arguments != contracts.GrantArgumentsCondition {
		ps = append(ps, "grants.arguments condition where the rule permits the same arguments only")
	}
	return ps
}

// GrantCondition is a compiled grant condition: CEL over the same
// variables as a rule's `when` (args, run, tool, agent, tenant, labels).
type GrantCondition struct {
	c *condition
}

// CompileGrantCondition type-checks a grant's condition. The error says
// what is wrong, for the approver who wrote it.
func CompileGrantCondition(src string) (*GrantCondition, error) {
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("the condition is empty")
	}
	c, issues := compileCondition(src)
	if len(issues) > 0 {
		msgs := make([]string, len(issues))
		for i, is := range issues {
			msgs[i] = is.msg
		}
		return nil, fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return &GrantCondition{c: c}, nil
}

// Match evaluates the condition for one call. An error never matches.
func (g *GrantCondition) Match(ctx context.Context, in Input) (bool, error) {
	act := &activation{in: in}
	if err := act.prepare(g.c); err != nil {
		return false, err
	}
	return g.c.eval(ctx, act)
}
