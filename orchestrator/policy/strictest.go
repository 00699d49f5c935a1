package policy

import (
	"cmp"
	"slices"
	"time"

	"github.com/countersign/countersign/contracts"
)

// This file says which of two decisions is stricter and how two decisions
// a call could get combine into one at least as strict as both. A call
// whose condition errors could fall under the erroring rule (as if the
// condition held) or under the rules below it (as if it did not): it gets
// strictest of the two (see Evaluate). weakerThan is the yardstick the
// combination is held to, and the one the property tests hold the shipped
// policies to.

// actionRank orders the verdicts: deny is strictest, allow weakest.
func actionRank(action string) int {
	switch action {
	case ActionAllow:
		return 0
	case ActionRequireApproval:
		return 1
	}
	return 2 // deny, and anything unknown
}

// strictest combines a and b, two decisions one call could get, into one
// at least as strict as each in every dimension weakerThan compares:
//
//   - verdict: deny over require_approval over allow; between two denies
//     or two allows, a.
//   - between two gates, dimension by dimension: the higher quorum and risk;
//     veto if either vetoes; self-approval only if both allow it; sequence
//     order if either orders; reject on timeout if either rejects; the
//     allowed decisions both allow (never none: if they share none, the
//     primary side's); the sensitive patterns and channels of both; the
//     reminders of both that fall before the deadline; grants only as far
//     as both permit them (nil if either permits only the call); a
//     reviewer that decides only as far as both let it (StricterReviewer).
//   - the deadline is the later of the two. Where time approves (both say
//     on_timeout approve) the later deadline is the stricter one. Where it
//     rejects, a longer wait asks the same people for the same quorum and
//     is no weaker; it gives a human time to decide.
//   - approvers: a side that names approvers is stricter than one that lets
//     anyone approve; between two that name approvers, the side with the
//     higher quorum, then the higher risk, then a. That side is the primary
//     one: its rule, line, summary, reason and escalation ladder are the
//     result's, so Rule names a rule the call matched whose approvers
//     decide it. The quorum can then exceed the approvers the primary side
//     names (2 of anyone against 1 of {x} gives 2 of {x}): such a gate
//     cannot be approved, which fails closed; it is never met by fewer.
//
// Error is a's when a has one, else b's. The result shares no slice with a
// or b.
func strictest(a, b Decision) Decision {
	ra, rb := actionRank(a.Action), actionRank(b.Action)
	err := cmp.Or(a.Error, b.Error)
	if ra != rb || a.Action != ActionRequireApproval {
		d := a
		if rb > ra {
			d = b
		}
		d = d.clone()
		d.Error = err
		return d
	}
	p, o := a, b
	if primaryIsSecond(a, b) {
		p, o = b, a
	}
	d := p.clone()
	d.Error = err
	if riskRank(o.Risk) > riskRank(d.Risk) {
		d.Risk = o.Risk
	}
	d.Quorum = max(p.Quorum, o.Quorum)
	d.Veto = p.Veto || o.Veto
	d.AllowSelfApproval = p.AllowSelfApproval && o.AllowSelfApproval
	if o.Order == contracts.OrderSequence {
		d.Order = contracts.OrderSequence
	}
	if o.OnTimeout != contracts.OnTimeoutApprove {
		d.OnTimeout = o.OnTimeout
	}
	d.Timeout = max(p.Timeout, o.Timeout)
	d.StepUp = cmp.Or(d.StepUp, o.StepUp)
	// An approval that lapses sooner is the stricter.
	if o.ClaimWithin > 0 && (d.ClaimWithin == 0 || o.ClaimWithin < d.ClaimWithin) {
		d.ClaimWithin = o.ClaimWithin
	}
	d.AllowedDecisions = bothAllow(d.AllowedDecisions, o.AllowedDecisions)
	d.Channels = union(d.Channels, o.Channels)
	d.Notify = unionStages(d.Notify, o.Notify)
	d.Sensitive = union(d.Sensitive, o.Sensitive)
	for _, f := range o.sensitiveFields {
		if !slices.Contains(d.sensitiveFields, f) {
			d.sensitiveFields = append(slices.Clip(d.sensitiveFields), f)
		}
	}
	d.Reminders = reminders(d.Reminders, o.Reminders, d.Timeout)
	d.Grants = bothGrant(p.Grants, o.Grants)
	d.Reviewer = StricterReviewer(p.Reviewer, o.Reviewer)
	return d
}

// primaryIsSecond reports whether b, not a, is the primary side of two
// gates: the one whose approvers (and rule) the combination keeps.
func primaryIsSecond(a, b Decision) bool {
	if (len(a.Approvers) > 0) != (len(b.Approvers) > 0) {
		return len(b.Approvers) > 0
	}
	if qa, qb := max(1, a.Quorum), max(1, b.Quorum); qa != qb {
		return qb > qa
	}
	return riskRank(b.Risk) > riskRank(a.Risk)
}

// orAll is an allowed_decisions list with empty read as every decision.
func orAll(l []string) []string {
	if len(l) == 0 {
		return allDecisions
	}
	return l
}

// bothAllow is the decisions both lists allow, in p's order; p's own when
// they share none (a gate must allow some decision).
func bothAllow(p, o []string) []string {
	if len(o) == 0 {
		return p
	}
	if len(p) == 0 {
		return slices.Clone(o)
	}
	var out []string
	for _, d := range p {
		if slices.Contains(o, d) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return p
	}
	return out
}

// union is a followed by the entries of b it lacks.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(slices.Clip(a), s)
		}
	}
	return a
}

// reminders is the reminders of both, increasing, before the deadline.
func reminders(a, b []time.Duration, timeout time.Duration) []time.Duration {
	if len(b) == 0 {
		return a
	}
	out := slices.Concat(a, b)
	slices.Sort(out)
	out = slices.Compact(out)
	out = slices.DeleteFunc(out, func(r time.Duration) bool { return r >= timeout })
	if len(out) == 0 {
		return nil
	}
	return out
}

// bothGrant is the standing grants both limits permit: the scopes both
// list, the shorter max_ttl, same arguments where either says so; nil
// (only the call) when either is nil or they share no scope wider than
// the call.
func bothGrant(a, b *contracts.GrantLimits) *contracts.GrantLimits {
	if a == nil || b == nil {
		return nil
	}
	g := &contracts.GrantLimits{Arguments: a.Arguments, MaxTTL: a.MaxTTL}
	wider := false
	for _, s := range a.Scopes {
		if slices.Contains(b.Scopes, s) {
			g.Scopes = append(g.Scopes, s)
			wider = wider || s != contracts.GrantScopeCall
		}
	}
	if !wider {
		return nil
	}
	if ttl(b.MaxTTL) < ttl(a.MaxTTL) {
		g.MaxTTL = b.MaxTTL
	}
	if b.Arguments == contracts.GrantArgumentsSame {
		g.Arguments = b.Arguments
	}
	return g
}

// ttl reads a grant limit's max_ttl; one that does not parse permits
// nothing.
func ttl(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d
}

// weakerThan lists the dimensions in which d lets a call through more
// easily than o: nil when d is at least as strict as o in every one.
// Between two gates it compares quorum, risk, veto, self-approval, order,
// on_timeout, the deadline where time approves, whether the approvers are
// named, the allowed decisions, the sensitive values and the grants. It
// does not compare two different sets of named approvers (which is
// stricter is a judgement; strictest keeps the side with the higher
// quorum and risk), escalation, reminders, channels or the summary, which
// decide who is told and how.
func (d Decision) weakerThan(o Decision) []string {
	rd, ro := actionRank(d.Action), actionRank(o.Action)
	switch {
	case rd < ro:
		return []string{"verdict " + d.Action + " is weaker than " + o.Action}
	case rd > ro || d.Action != ActionRequireApproval:
		return nil
	}
	var out []string
	add := func(cond bool, what string) {
		if cond {
			out = append(out, what)
		}
	}
	add(max(1, d.Quorum) < max(1, o.Quorum), "quorum "+itoa(d.Quorum)+" < "+itoa(o.Quorum))
	add(riskRank(d.Risk) < riskRank(o.Risk), "risk "+d.Risk+" < "+o.Risk)
	add(o.Veto && !d.Veto, "no veto")
	add(d.AllowSelfApproval && !o.AllowSelfApproval, "self-approval allowed")
	add(o.Order == contracts.OrderSequence && d.Order != contracts.OrderSequence, "order "+d.Order+", not sequence")
	dApproves, oApproves := d.OnTimeout == contracts.OnTimeoutApprove, o.OnTimeout == contracts.OnTimeoutApprove
	add(dApproves && !oApproves, "approves on timeout")
	add(dApproves && oApproves && d.Timeout < o.Timeout, "approves on timeout sooner ("+shortDuration(d.Timeout)+" < "+shortDuration(o.Timeout)+")")
	add(len(d.Approvers) == 0 && len(o.Approvers) > 0, "anyone may approve")
	for _, dec := range orAll(d.AllowedDecisions) {
		add(!slices.Contains(orAll(o.AllowedDecisions), dec), "allows decision "+dec)
	}
	for _, s := range o.Sensitive {
		add(!slices.Contains(d.Sensitive, s), "shows sensitive "+s)
	}
	for _, f := range o.sensitiveFields {
		add(!slices.Contains(d.sensitiveFields, f), "shows sensitive_fields "+f.src)
	}
	out = append(out, grantsWeaker(d.Grants, o.Grants)...)
	out = append(out, reviewerWeaker(d.Reviewer, o.Reviewer)...)
	return out
}

// grantsWeaker lists what grant limits d permit that o does not.
func grantsWeaker(d, o *contracts.GrantLimits) []string {
	if d == nil {
		return nil
	}
	if o == nil {
		return []string{"permits standing grants"}
	}
	var out []string
	for _, s := range d.Scopes {
		if !slices.Contains(o.Scopes, s) {
			out = append(out, "permits grant scope "+s)
		}
	}
	if ttl(d.MaxTTL) > ttl(o.MaxTTL) {
		out = append(out, "permits grants for longer ("+d.MaxTTL+" > "+o.MaxTTL+")")
	}
	if d.Arguments == contracts.GrantArgumentsCondition && o.Arguments != contracts.GrantArgumentsCondition {
		out = append(out, "permits condition grants")
	}
	return out
}
