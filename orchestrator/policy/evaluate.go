package policy

import (
	"context"
	"strings"
)

// Step says why one rule did or did not decide a call.
type Step struct {
	Rule    string `json:"rule"`
	Line    int    `json:"line"`
	Matched bool   `json:"matched"`
	// Why reads like "tool payments.send matches payments.*; condition
	// args.amount > 100 is false".
	Why string `json:"why"`
}

// Evaluate decides one call: the first rule whose tools, agents, tenants
// and labels match and whose condition holds decides; calls no rule matches
// get the default. A condition that errors decides too: the call gates and
// Decision.Error says why. The decision's slices are the caller's to keep.
func (p *Policy) Evaluate(in Input) Decision {
	return p.evaluate(context.Background(), &in)
}

// EvaluateContext is Evaluate with a context that can interrupt a long
// condition; an interrupted condition errors, so the call gates.
func (p *Policy) EvaluateContext(ctx context.Context, in Input) Decision {
	if ctx == nil {
		ctx = context.Background()
	}
	return p.evaluate(ctx, &in)
}

// Explain decides like Evaluate and also says, for every rule it
// considered, in order, whether it matched and why; the last step is the
// deciding one (rule "default" when no rule matched).
func (p *Policy) Explain(in Input) (Decision, []Step) {
	var steps []Step
	var act *activation // built at the first condition
	var why strings.Builder
	for i := range p.rules {
		r := &p.rules[i]
		why.Reset()
		step := Step{Rule: r.name, Line: r.line}
		if !r.explainMatch(&in, &why) {
			step.Why = why.String()
			steps = append(steps, step)
			continue
		}
		if r.cond != nil {
			if act == nil {
				act = &activation{in: in}
			}
			ok, err := r.cond.run(context.Background(), act)
			sep(&why)
			switch {
			case err != nil:
				d := r.failClosed.clone()
				d.Error = err.Error()
				why.WriteString("condition error: " + d.Error + "; the call gates (fail closed)")
				step.Matched, step.Why = true, why.String()
				return d, append(steps, step)
			case !ok:
				why.WriteString("condition " + r.cond.src + " is false")
				step.Why = why.String()
				steps = append(steps, step)
				continue
			}
			why.WriteString("condition " + r.cond.src + " is true")
		}
		step.Matched, step.Why = true, why.String()
		return r.decision.clone(), append(steps, step)
	}
	steps = append(steps, Step{Rule: defaultRuleName, Matched: true, Why: "no rule matched; the default is " + p.dflt.Action})
	return p.dflt.clone(), steps
}

// evaluate decides without explaining: only the rules whose tool globs
// match are looked at (see candidates), and only their conditions run.
func (p *Policy) evaluate(ctx context.Context, in *Input) Decision {
	var act *activation // built at the first condition
	for _, i := range p.candidates(in.Tool) {
		r := &p.rules[i]
		if !r.matchesRun(in) {
			continue
		}
		if r.cond != nil {
			if act == nil {
				act = &activation{in: *in}
			}
			ok, err := r.cond.run(ctx, act)
			if err != nil {
				d := r.failClosed.clone()
				d.Error = err.Error()
				return d
			}
			if !ok {
				continue
			}
		}
		return r.decision.clone()
	}
	return p.dflt.clone()
}

// matchesRun checks what a rule says about the run: agents, tenants and
// labels.
func (r *rule) matchesRun(in *Input) bool {
	if len(r.agents) > 0 && !matchGlobs(r.agents, in.Run.Agent) {
		return false
	}
	if len(r.tenants) > 0 && !matchGlobs(r.tenants, in.Run.Tenant) {
		return false
	}
	for _, l := range r.labels {
		if v, ok := in.Run.Labels[l.key]; !ok || v != l.value {
			return false
		}
	}
	return true
}

// run prepares what the condition reads and evaluates it.
func (c *condition) run(ctx context.Context, act *activation) (bool, error) {
	if err := act.prepare(c); err != nil {
		return false, err
	}
	return c.eval(ctx, act)
}

// explainMatch checks the rule's globs and labels and writes why.
func (r *rule) explainMatch(in *Input, why *strings.Builder) bool {
	if len(r.tools) > 0 && !explainGlobs(r.tools, in.Tool, "tool", why) {
		return false
	}
	if len(r.agents) > 0 && !explainGlobs(r.agents, in.Run.Agent, "agent", why) {
		return false
	}
	if len(r.tenants) > 0 && !explainGlobs(r.tenants, in.Run.Tenant, "tenant", why) {
		return false
	}
	for _, l := range r.labels {
		v, ok := in.Run.Labels[l.key]
		sep(why)
		switch {
		case !ok:
			why.WriteString("label " + l.key + " is not set (want " + l.value + ")")
			return false
		case v != l.value:
			why.WriteString("label " + l.key + " is " + show(v) + ", not " + l.value)
			return false
		}
		why.WriteString("label " + l.key + "=" + l.value)
	}
	return true
}

func explainGlobs(globs []glob, s, what string, why *strings.Builder) bool {
	sep(why)
	for i := range globs {
		if globs[i].match(s) {
			why.WriteString(what + " " + show(s) + " matches " + globs[i].pattern)
			return true
		}
	}
	if len(globs) == 1 {
		why.WriteString(what + " " + show(s) + " does not match " + globs[0].pattern)
		return false
	}
	why.WriteString(what + " " + show(s) + " matches none of ")
	for i := range globs {
		if i > 0 {
			why.WriteString(", ")
		}
		why.WriteString(globs[i].pattern)
	}
	return false
}

func sep(b *strings.Builder) {
	if b.Len() > 0 {
		b.WriteString("; ")
	}
}

// show prints a name, quoting it when it is empty.
func show(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// clone copies the decision's slices, in one allocation, so that a caller
// that changes them cannot change the policy.
func (d Decision) clone() Decision {
	n := len(d.Approvers) + len(d.AllowedDecisions) + len(d.Channels)
	if n == 0 {
		return d
	}
	buf := make([]string, 0, n)
	d.Approvers, buf = carve(buf, d.Approvers)
	d.AllowedDecisions, buf = carve(buf, d.AllowedDecisions)
	d.Channels, _ = carve(buf, d.Channels)
	return d
}

// carve copies s to the end of buf and returns the copy, capped so that an
// append to it cannot overwrite the next one.
func carve(buf, s []string) ([]string, []string) {
	if s == nil {
		return nil, buf
	}
	start := len(buf)
	buf = append(buf, s...)
	return buf[start:len(buf):len(buf)], buf
}
