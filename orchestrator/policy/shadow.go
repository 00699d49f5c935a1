package policy

import (
	"context"
	"slices"
	"strings"

	"github.com/countersign/countersign/contracts"
)

// This file runs shadow rules (mode: shadow): rules that are evaluated on
// every call and never enforced. The enforcing walk never sees them, so a
// policy decides every call exactly as it would without them; beside it,
// each shadow rule that would have matched before the enforcing decision
// says what the policy would decide were that rule enforced.

// shadowRule is a compiled shadow rule and its place among the enforcing
// rules: it sits before Policy.rules[pos] (pos == len(rules): after the
// last, before the default).
type shadowRule struct {
	rule
	pos int
}

// ShadowVerdict is what one shadow rule would have decided for a call: the
// decision the policy would give were that rule enforced, in its place.
type ShadowVerdict struct {
	// Rule names the shadow rule; Line is its line in the file.
	Rule string
	Line int
	// Decision is the policy's decision with the rule enforced. It can
	// name another rule where the shadow rule's condition errors and a
	// stricter rule below wins (see Evaluate).
	Decision Decision
}

// Flips reports whether the shadow rule would change the enforced
// verdict: allow, require_approval or deny.
func (v ShadowVerdict) Flips(enforced Decision) bool { return v.Decision.Action != enforced.Action }

// ShadowRule describes a shadow rule of the policy.
type ShadowRule struct {
	Name   string
	Line   int
	Action string
}

// ShadowRules lists the policy's shadow rules in file order.
func (p *Policy) ShadowRules() []ShadowRule {
	out := make([]ShadowRule, len(p.shadow))
	for i := range p.shadow {
		r := &p.shadow[i].rule
		out[i] = ShadowRule{Name: r.name, Line: r.line, Action: r.decision.Action}
	}
	return out
}

// EvaluateShadow decides like EvaluateContext and also says what each
// shadow rule would have decided, for those that would have matched the
// call (globs, labels, and a condition that holds or errors) before the
// enforcing decision, in file order. The decision is the one
// EvaluateContext gives: shadow rules never change it.
func (p *Policy) EvaluateShadow(ctx context.Context, in Input) (Decision, []ShadowVerdict) {
	if ctx == nil {
		ctx = context.Background()
	}
	w := pass{ctx: ctx, in: &in}
	d, stop := p.decide(&w, nil)
	if len(p.shadow) == 0 {
		return d, nil
	}
	var out []ShadowVerdict
	for i := range p.shadow {
		s := &p.shadow[i]
		if s.pos > stop {
			break
		}
		if !w.wouldMatch(s) {
			continue
		}
		promoted := pass{ctx: ctx, in: &in, act: w.act}
		sd, _ := p.decide(&promoted, s)
		out = append(out, ShadowVerdict{Rule: s.name, Line: s.line, Decision: sd})
	}
	return d, out
}

// wouldMatch reports whether shadow rule s matches the call: its globs and
// labels, and a condition that holds or errors (an erroring condition is
// taken both ways, so the rule takes part).
func (w *pass) wouldMatch(s *shadowRule) bool {
	r := &s.rule
	if len(r.tools) > 0 && !matchGlobs(r.tools, w.in.Tool) || !r.matchesRun(w.in) {
		return false
	}
	if r.cond == nil {
		return true
	}
	if w.act == nil {
		w.act = &activation{in: *w.in}
	}
	holds, err := r.cond.run(w.ctx, w.act)
	return holds || err != nil
}

// explainShadow appends the steps of the shadow rules placed before
// enforcing rule i (len(p.rules): before the default).
func (p *Policy) explainShadow(in *Input, i int, steps []Step) []Step {
	for j := range p.shadow {
		s := &p.shadow[j]
		if s.pos != i {
			continue
		}
		var why strings.Builder
		step := Step{Rule: s.name, Line: s.line, Shadow: true}
		w := pass{ctx: context.Background(), in: in}
		globs := s.explainMatch(in, &why)
		matched := globs && w.wouldMatch(s)
		if globs && !matched {
			sep(&why)
			why.WriteString("condition " + s.cond.src + " is false")
		}
		sep(&why)
		if matched {
			promoted := pass{ctx: context.Background(), in: in, act: w.act}
			d, _ := p.decide(&promoted, s)
			step.Matched = true
			why.WriteString("shadow rule, not enforced: enforced here, the call would get " + verdictWhy(d))
			if d.Rule != s.name {
				why.WriteString(" (rule " + d.Rule + ")")
			}
		} else {
			why.WriteString("shadow rule, not enforced")
		}
		step.Why = why.String()
		steps = append(steps, step)
	}
	return steps
}

// Contract is the verdict as a request and a review's result record it.
func (v ShadowVerdict) Contract() contracts.ShadowVerdict {
	d := v.Decision
	out := contracts.ShadowVerdict{Rule: v.Rule, Action: d.Action, Error: d.Error}
	if d.Rule != v.Rule {
		out.DecidedBy = d.Rule
	}
	if d.Action == ActionRequireApproval {
		out.Risk, out.Quorum, out.StepUp = d.Risk, max(1, d.Quorum), d.StepUp
		out.Approvers = slices.Clone(d.Approvers)
	}
	return out
}

// ShadowContracts is Contract of each verdict, at most
// contracts.MaxShadowVerdicts of them; nil for none.
func ShadowContracts(vs []ShadowVerdict) []contracts.ShadowVerdict {
	if len(vs) == 0 {
		return nil
	}
	out := make([]contracts.ShadowVerdict, 0, min(len(vs), contracts.MaxShadowVerdicts))
	for _, v := range vs[:min(len(vs), contracts.MaxShadowVerdicts)] {
		out = append(out, v.Contract())
	}
	return out
}
