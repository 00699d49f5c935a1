package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
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
				step.Matched, step.Why = true, withTimers(why.String(), d)
				return d, append(steps, step)
			case !ok:
				why.WriteString("condition " + r.cond.src + " is false")
				step.Why = why.String()
				steps = append(steps, step)
				continue
			}
			why.WriteString("condition " + r.cond.src + " is true")
		}
		step.Matched, step.Why = true, withTimers(why.String(), r.decision)
		return r.decision.clone(), append(steps, step)
	}
	steps = append(steps, Step{Rule: defaultRuleName, Matched: true, Why: withTimers("no rule matched; the default is "+p.dflt.Action, p.dflt)})
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

// withTimers appends to why when the decision reminds and escalates.
func withTimers(why string, d Decision) string {
	if t := timersWhy(d); t != "" {
		if why == "" {
			return t
		}
		return why + "; " + t
	}
	return why
}

// timersWhy says when a gated decision reminds and escalates, one clause
// each, such as "reminders at 10m, 1h" and "escalation at 2h to ann, bob
// (email), at 4h to cfo"; "" when it does neither.
func timersWhy(d Decision) string {
	if d.Action != ActionRequireApproval {
		return ""
	}
	var b strings.Builder
	if len(d.Reminders) > 0 {
		b.WriteString("reminders at ")
		for i, r := range d.Reminders {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(shortDuration(r))
		}
	}
	if len(d.Escalation) > 0 {
		sep(&b)
		b.WriteString("escalation")
		const shown = 4
		for i, t := range d.Escalation {
			if i == shown {
				fmt.Fprintf(&b, ", and %d more tiers up to %s", len(d.Escalation)-shown, shortDuration(d.Escalation[len(d.Escalation)-1].After))
				break
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(" at " + shortDuration(t.After) + " to " + strings.Join(t.Approvers, ", "))
			if len(t.Channels) > 0 {
				b.WriteString(" (" + strings.Join(t.Channels, ", ") + ")")
			}
		}
	}
	return b.String()
}

// shortDuration prints a duration without zero minutes and seconds: 1h,
// 10m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// show prints a name, quoting it when it is empty.
func show(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// clone copies the decision's slices, the strings in one allocation, so
// that a caller that changes them cannot change the policy.
func (d Decision) clone() Decision {
	n := len(d.Approvers) + len(d.AllowedDecisions) + len(d.Channels) + len(d.Sensitive)
	for _, t := range d.Escalation {
		n += len(t.Approvers) + len(t.Channels)
	}
	if n == 0 && d.Reminders == nil && d.Escalation == nil && d.Grants == nil {
		return d
	}
	buf := make([]string, 0, n)
	d.Approvers, buf = carve(buf, d.Approvers)
	d.AllowedDecisions, buf = carve(buf, d.AllowedDecisions)
	d.Channels, buf = carve(buf, d.Channels)
	d.Sensitive, buf = carve(buf, d.Sensitive)
	d.Reminders = slices.Clone(d.Reminders)
	if d.Grants != nil {
		l := *d.Grants
		l.Scopes = slices.Clone(l.Scopes)
		d.Grants = &l
	}
	if d.Escalation != nil {
		tiers := make([]EscalationTier, len(d.Escalation))
		for i, t := range d.Escalation {
			tiers[i].After = t.After
			tiers[i].Approvers, buf = carve(buf, t.Approvers)
			tiers[i].Channels, buf = carve(buf, t.Channels)
		}
		d.Escalation = tiers
	}
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
