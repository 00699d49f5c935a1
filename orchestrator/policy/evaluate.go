package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
)

// Step says why one rule did or did not decide a call.
type Step struct {
	Rule    string `json:"rule"`
	Line    int    `json:"line"`
	Matched bool   `json:"matched"`
	// Why reads like "tool payments.send matches payments.*; condition
	// args.amount > 100 is false".
	Why string `json:"why"`
	// Shadow marks a shadow rule's step: it never decides; Why says what
	// it would have decided (see EvaluateShadow).
	Shadow bool `json:"shadow,omitempty"`
}

// Evaluate decides one call: the first rule whose tools, agents, tenants
// and labels match and whose condition holds decides; calls no rule matches
// get the default.
//
// A condition that errors (a missing argument, a wrong type, arguments
// nested too deeply, the cost limit) is taken both ways: as if it held, the
// rule decides (an allow rule gates instead, see rule.failClosed); as if it
// did not, the rules below go on (and may error too). The call gets the
// stricter of the two (see strictest), so no choice of arguments gets a
// weaker gate than a well-typed call could get. Decision.Error is the first
// error, and such a call never runs without approval. The decision's slices
// are the caller's to keep.
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
// deciding one (rule "default" when no rule matched). Where a condition
// errored, its step says so, the later steps are the branch where it did
// not hold, and a last step names the rule whose settings won and what the
// others added. A shadow rule the walk reaches gets a step of its own,
// marked Shadow, saying what it would have decided; it never decides.
func (p *Policy) Explain(in Input) (Decision, []Step) {
	var steps []Step
	var act *activation // built at the first condition
	var why strings.Builder
	var e errored
	for i := range p.rules {
		steps = p.explainShadow(&in, i, steps)
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
				t := r.onError(err)
				why.WriteString("condition error: " + err.Error() + "; both ways count: if it held, " + verdictWhy(t) +
					"; if not, the rules below decide; the call gets the stricter")
				step.Matched, step.Why = true, withTimers(why.String(), t)
				steps = append(steps, step)
				if e.add(t) {
					return e.d, append(steps, e.step("no rule below can be stricter"))
				}
				continue
			case !ok:
				why.WriteString("condition " + r.cond.src + " is false")
				step.Why = why.String()
				steps = append(steps, step)
				continue
			}
			why.WriteString("condition " + r.cond.src + " is true")
		}
		step.Matched, step.Why = true, withTimers(why.String(), r.decision)
		steps = append(steps, step)
		if !e.any() {
			return r.decision.clone(), steps
		}
		e.add(r.decision)
		return e.d, append(steps, e.step(""))
	}
	steps = p.explainShadow(&in, len(p.rules), steps)
	steps = append(steps, Step{Rule: defaultRuleName, Matched: true, Why: withTimers("no rule matched; the default is "+p.dflt.Action, p.dflt)})
	if !e.any() {
		return p.dflt.clone(), steps
	}
	e.add(p.dflt)
	return e.d, append(steps, e.step(""))
}

// evaluate decides without explaining: only the rules whose tool globs
// match are looked at (see candidates), and only their conditions run.
func (p *Policy) evaluate(ctx context.Context, in *Input) Decision {
	w := pass{ctx: ctx, in: in}
	d, _ := p.decide(&w, nil)
	return d
}

// pass is one walk down the rules for one call; act is shared by the
// passes of one call (see EvaluateShadow).
type pass struct {
	ctx context.Context
	in  *Input
	act *activation // built at the first condition
	e   errored
}

// decide walks the enforcing rules; with promote, the shadow rule is taken
// as an enforcing rule at its place. It returns the decision and where the
// walk stopped: the index of the enforcing rule that decided, or
// len(p.rules) for the default (a promoted rule that decides stops at its
// place).
func (p *Policy) decide(w *pass, promote *shadowRule) (Decision, int) {
	for _, i := range p.candidates(w.in.Tool) {
		if promote != nil && int(i) >= promote.pos {
			if d, ok := w.visitPromoted(promote); ok {
				return d, promote.pos
			}
			promote = nil
		}
		if d, ok := w.visit(&p.rules[i]); ok {
			return d, int(i)
		}
	}
	if promote != nil {
		if d, ok := w.visitPromoted(promote); ok {
			return d, promote.pos
		}
	}
	if !w.e.any() {
		return p.dflt.clone(), len(p.rules)
	}
	w.e.add(p.dflt)
	return w.e.d, len(p.rules)
}

// visit applies rule r, whose tool globs match, to the call; ok says the
// walk ends with d.
func (w *pass) visit(r *rule) (d Decision, ok bool) {
	if !r.matchesRun(w.in) {
		return Decision{}, false
	}
	if r.cond != nil {
		if w.act == nil {
			w.act = &activation{in: *w.in}
		}
		holds, err := r.cond.run(w.ctx, w.act)
		if err != nil {
			if w.e.add(r.onError(err)) {
				return w.e.d, true
			}
			return Decision{}, false
		}
		if !holds {
			return Decision{}, false
		}
	}
	if !w.e.any() {
		return r.decision.clone(), true
	}
	w.e.add(r.decision)
	return w.e.d, true
}

// visitPromoted is visit for a shadow rule, whose tool globs are checked
// here (candidates lists enforcing rules only).
func (w *pass) visitPromoted(s *shadowRule) (Decision, bool) {
	if len(s.rule.tools) > 0 && !matchGlobs(s.rule.tools, w.in.Tool) {
		return Decision{}, false
	}
	return w.visit(&s.rule)
}

// onError is what the rule decides when its condition errors with err, as
// if the condition held: its failClosed decision, with the error, and, for
// a deny, the error in the reason so that the model can fix its call.
func (r *rule) onError(err error) Decision {
	d := r.failClosed.clone()
	d.Error = err.Error()
	if d.Action == ActionDeny {
		d.Reason += " (The policy could not check this call: " + d.Error + ".)"
	}
	return d
}

// errored gathers, once a condition has errored, the decisions the call
// could get: the erroring rules' own, and the one that decides when none
// of their conditions holds.
type errored struct {
	d     Decision   // strictest of those so far
	rules []Decision // each, for Explain
}

func (e *errored) any() bool { return len(e.rules) > 0 }

// add counts one more decision the call could get and reports whether the
// result is a deny, which nothing below can make stricter.
func (e *errored) add(d Decision) bool {
	if len(e.rules) == 0 {
		e.d = d.clone()
	} else {
		e.d = strictest(e.d, d)
	}
	e.rules = append(e.rules, d)
	return e.d.Action == ActionDeny
}

// step is Explain's last step: the rule whose settings won, and why.
func (e *errored) step(note string) Step {
	var b strings.Builder
	b.WriteString("condition error: " + e.d.Error + " (rule " + e.rules[0].Rule + "); the call gets the strictest of ")
	for i, d := range e.rules {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.Rule + " (" + verdictWhy(d) + ")")
	}
	b.WriteString(": " + e.d.Rule + " decides")
	if e.d.Action == ActionRequireApproval {
		b.WriteString(", " + verdictWhy(e.d))
	}
	if note != "" {
		b.WriteString("; " + note)
	}
	return Step{Rule: e.d.Rule, Line: e.d.Line, Matched: true, Why: b.String()}
}

// verdictWhy says in a few words what a decision asks for: "deny",
// "allow", or the gate: "require_approval: risk high, 1 of alice, bob,
// on_timeout reject after 4h".
func verdictWhy(d Decision) string {
	if d.Action != ActionRequireApproval {
		return d.Action
	}
	who := "anyone"
	if len(d.Approvers) > 0 {
		who = strings.Join(d.Approvers, ", ")
	}
	return fmt.Sprintf("require_approval: risk %s, %d of %s, on_timeout %s after %s",
		d.Risk, max(1, d.Quorum), who, d.OnTimeout, shortDuration(d.Timeout))
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
func shortDuration(d time.Duration) string { return contracts.ShortDuration(d) }

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
