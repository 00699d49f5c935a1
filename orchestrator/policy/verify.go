package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// This file checks a request's snapshot against what the policy version it
// names gives for its call: the publisher of a request is not trusted to
// have asked for as much as the rule does.

// HumanInputTool is the tool name a human_input request is decided as,
// with arguments {"question": text}.
const HumanInputTool = "request_human_input"

// RequestInput is the call a request asks about, as the orchestrator put it
// to the policy: the tool call of a tool approval; for a question, a call of
// HumanInputTool with arguments {"question": text}.
//
// The history functions answer from the figures the request carries
// (FiguresHistory): a figure it does not carry errors, and the condition is
// taken both ways.
func RequestInput(req *contracts.ApprovalRequested) Input {
	in := Input{Run: req.Run, History: FiguresHistory(req.History)}
	switch {
	case req.Kind == contracts.KindHumanInput:
		in.Tool = HumanInputTool
		text := ""
		if req.Question != nil {
			text = req.Question.Text
		}
		in.Arguments, _ = json.Marshal(map[string]string{"question": text}) // cannot fail
	case req.ToolCall != nil:
		in.Tool, in.Arguments = req.ToolCall.Name, req.ToolCall.Arguments
	}
	return in
}

// VerifyOptions bound the deadline checks of VerifyRequest.
type VerifyOptions struct {
	// Stored is when the bus stored the request: the server's clock, which
	// the publisher cannot set. Zero skips the checks against it.
	Stored time.Time
	// Retention caps a rule's timeout, as the orchestrator caps it (zero:
	// no cap).
	Retention time.Duration
	// ClockSkew is how far the publisher's clock (created_at) may be from
	// Stored, and the slack of every deadline comparison.
	ClockSkew time.Duration
	// Members, when set, resolves a group the rule names against the live
	// directory: only its members (or the group name left unresolved,
	// which is nobody) may stand for it in the snapshot. Unset, any name
	// may (the directory that resolved it is not known here).
	Members func(group string) []string
	// Stricter checks only that the snapshot is at least as strict as d,
	// from a policy version other than the one the request names (the
	// live one): the version and rule may differ, a call d allows is no
	// weaker than the request, and the approvers may be other people (but
	// not anyone where d names people).
	Stricter bool
}

// RequestError says why a request's snapshot is refused. Reason is one of
// the contract's refusals (contracts.RefusalNotGated, ...); Problems says,
// field by field, what is missing.
type RequestError struct {
	Reason   string
	Problems []string
}

func (e *RequestError) Error() string {
	if len(e.Problems) == 0 {
		return e.Reason
	}
	return e.Reason + ": " + strings.Join(e.Problems, "; ")
}

// allDecisions is what an empty allowed_decisions lets approvers do on a
// tool call.
var allDecisions = []string{
	contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond,
}

// VerifyRequest checks that req asks for at least what d gives, d being
// what the policy version req names decides for req's call (see
// RequestInput). It returns nil or a *RequestError. It is pure.
//
// Checked exactly: the rule, that the call is gated at all, quorum k,
// veto, self-approval, order, the allowed decisions, on_timeout, the
// deadline, the escalation ladder, and the approvers when the rule names
// people. Approver groups the policy does not define are resolved by the
// orchestrator's directory, which the check does not see: where a rule
// names such a group, a snapshot approver who is not one of the rule's named
// people is taken to be a member. The sensitive values must include every
// one the rule's patterns and the snapshot's tool schema name in the
// arguments (a request that would show one of them is refused). Reminders, channels, risk and summary
// decide who is told and how, not who may decide, and are not checked.
func VerifyRequest(req *contracts.ApprovalRequested, d Decision, opts VerifyOptions) error {
	human := req.Kind == contracts.KindHumanInput
	switch {
	case opts.Stricter && d.Action == ActionDeny:
		return &RequestError{Reason: contracts.RefusalNotGated,
			Problems: []string{fmt.Sprintf("the live policy version %s denies this call (rule %s)", d.Version, d.Rule)}}
	case opts.Stricter && d.Action == ActionAllow:
		return nil
	case opts.Stricter:
	case req.Policy.Version != d.Version:
		return &RequestError{Reason: contracts.RefusalRuleMismatch,
			Problems: []string{fmt.Sprintf("the request names policy version %q, checked against %q", req.Policy.Version, d.Version)}}
	case d.Action == ActionDeny:
		return &RequestError{Reason: contracts.RefusalNotGated,
			Problems: []string{fmt.Sprintf("policy version %s denies this call (rule %s)", d.Version, d.Rule)}}
	case d.Action == ActionAllow && !human:
		// A question the policy allows is still asked; a tool call it
		// allows runs without asking anyone.
		return &RequestError{Reason: contracts.RefusalNotGated,
			Problems: []string{fmt.Sprintf("policy version %s allows this call without approval (rule %s)", d.Version, d.Rule)}}
	case req.Policy.Rule != d.Rule:
		return &RequestError{Reason: contracts.RefusalRuleMismatch,
			Problems: []string{fmt.Sprintf("policy version %s decides this call by rule %q, not %q", d.Version, d.Rule, req.Policy.Rule)}}
	}
	var ps []string
	add := func(format string, args ...any) { ps = append(ps, fmt.Sprintf(format, args...)) }
	q := req.Quorum
	if got, want := max(1, q.Required), max(1, d.Quorum); got < want {
		add("quorum.required %d is below the rule's %d", got, want)
	}
	if d.Veto && !q.Veto {
		add("quorum.veto is off where the rule vetoes")
	}
	if q.AllowSelfApproval && !d.AllowSelfApproval {
		add("quorum.allow_self_approval is on where the rule forbids self-approval")
	}
	if d.Order == contracts.OrderSequence && q.Order != contracts.OrderSequence {
		add("quorum.order %q where the rule says sequence", q.Order)
	}
	if opts.Stricter {
		// Another version may name other people, which is no weakening;
		// leaving anyone to approve where it names people is.
		if len(d.Approvers) > 0 && len(q.Approvers) == 0 {
			add("quorum.approvers is empty (anyone) where the live rule names approvers")
		}
	} else {
		ps = append(ps, checkApprovers(req, d, opts.Members)...)
	}
	ps = append(ps, checkDecisions(req, d)...)
	if d.ClaimWithin > 0 && approval.ClaimWithin(req) > d.ClaimWithin {
		add("claim_within %s is longer than the rule's %s", approval.ClaimWithin(req), d.ClaimWithin)
	}
	if d.StepUp != "" && req.StepUp != d.StepUp {
		add("step_up %q where the rule says %s", req.StepUp, d.StepUp)
	}
	if req.OnTimeout == contracts.OnTimeoutApprove {
		switch {
		case human:
			add("on_timeout approve on a question: time never answers for a human")
		case d.OnTimeout != contracts.OnTimeoutApprove:
			add("on_timeout approve where the rule says %s", d.OnTimeout)
		}
	}
	ps = append(ps, checkDeadline(req, d, opts)...)
	ps = append(ps, checkSensitive(req, d)...)
	ps = append(ps, checkGrants(req, d)...)
	if len(ps) > 0 {
		return &RequestError{Reason: contracts.RefusalWeakerThanPolicy, Problems: ps}
	}
	return nil
}

// checkApprovers compares who may approve, at any time of the request's
// life, with who the rule lets approve then.
func checkApprovers(req *contracts.ApprovalRequested, d Decision, members func(string) []string) []string {
	var ps []string
	if len(d.Approvers) == 0 {
		// Anyone may approve under the rule: no snapshot approver list
		// lets more people in. The escalation ladder is still the rule's.
		return checkLadder(req, d, nil)
	}
	if len(req.Quorum.Approvers) == 0 {
		ps = append(ps, "quorum.approvers is empty (anyone) where the rule names approvers")
	}
	base := approverSet(d.Approvers)
	base.members = members
	for _, a := range req.Quorum.Approvers {
		if !base.admits(a) {
			ps = append(ps, fmt.Sprintf("approver %q is not one of the rule's", a))
		}
	}
	return append(ps, checkLadder(req, d, &base)...)
}

// checkLadder requires the rule's escalation tiers, at the rule's times,
// and, when base is the rule's approvers (nil: anyone), tier approvers that
// the rule lets approve by that tier's time.
func checkLadder(req *contracts.ApprovalRequested, d Decision, base *approvers) []string {
	var ps []string
	if len(d.Escalation) > 0 {
		if len(req.Escalation) != len(d.Escalation) {
			ps = append(ps, fmt.Sprintf("escalation has %d tiers where the rule has %d", len(req.Escalation), len(d.Escalation)))
		} else {
			for i, t := range req.Escalation {
				if after, err := time.ParseDuration(t.After); err != nil || after != d.Escalation[i].After {
					ps = append(ps, fmt.Sprintf("escalation[%d].after %q where the rule says %s", i, t.After, d.Escalation[i].After))
				}
			}
		}
	}
	if base == nil {
		return ps
	}
	for i, t := range req.Escalation {
		after, err := time.ParseDuration(t.After)
		if err != nil {
			continue // refused as malformed before this check
		}
		// Who the rule lets approve once this tier is reached: its
		// approvers and those of every rule tier due by then.
		allowed := *base
		for _, rt := range d.Escalation {
			if rt.After <= after {
				allowed = allowed.with(rt.Approvers)
			}
		}
		for _, a := range t.Approvers {
			if !allowed.admits(a) {
				ps = append(ps, fmt.Sprintf("escalation[%d] approver %q is not one the rule lets approve after %s", i, a, t.After))
			}
		}
	}
	return ps
}

// approvers is who a rule names: people, and groups the policy does not
// define (resolved by the orchestrator's directory).
type approvers struct {
	people, groups []string
	// members resolves a group against the live directory (nil: unknown).
	members func(string) []string
}

func approverSet(list []string) approvers {
	return approvers{}.with(list)
}

func (s approvers) with(list []string) approvers {
	s.people, s.groups = slices.Clone(s.people), slices.Clone(s.groups)
	for _, a := range list {
		if strings.HasPrefix(a, groupPrefix) {
			s.groups = append(s.groups, a)
		} else {
			s.people = append(s.people, a)
		}
	}
	return s
}

// admits reports whether a may stand in a snapshot for s: one of its
// people; one of its groups left as written (no directory knew it, so
// nobody can approve as it); or, when s names a group, anyone else but a
// group name, as a member the directory gave (which is not checked here).
//
// With the live directory (members set), a name stands for a group only
// when the directory lists it among the group's members.
func (s approvers) admits(a string) bool {
	if slices.Contains(s.people, a) || slices.Contains(s.groups, a) {
		return true
	}
	if strings.HasPrefix(a, groupPrefix) {
		return false
	}
	if s.members == nil {
		return len(s.groups) > 0
	}
	return slices.ContainsFunc(s.groups, func(g string) bool { return slices.Contains(s.members(g), a) })
}

// checkDecisions requires the allowed decisions to be among the rule's.
func checkDecisions(req *contracts.ApprovalRequested, d Decision) []string {
	if req.Kind == contracts.KindHumanInput {
		// A question is only ever answered; the arbiter refuses every other
		// decision on one whatever the snapshot lists.
		for _, dec := range req.AllowedDecisions {
			if dec != contracts.DecisionAnswer {
				return []string{fmt.Sprintf("allowed_decisions lists %q on a question", dec)}
			}
		}
		return nil
	}
	got := req.AllowedDecisions
	if len(got) == 0 {
		got = allDecisions
	}
	want := d.AllowedDecisions
	if len(want) == 0 {
		want = allDecisions
	}
	var ps []string
	for _, dec := range got {
		if !slices.Contains(want, dec) {
			ps = append(ps, fmt.Sprintf("allowed_decisions lists %q, which the rule does not allow", dec))
		}
	}
	return ps
}

// checkDeadline bounds the deadline by the rule's timeout: never later than
// the timeout after creation, and, where time approves, never sooner either,
// counted from when the bus stored the request (which the publisher cannot
// set). Where time can approve or widen the approvers (escalation tiers
// count from created_at), created_at must be when the request was stored.
func checkDeadline(req *contracts.ApprovalRequested, d Decision, opts VerifyOptions) []string {
	var ps []string
	timeout := d.Timeout
	if opts.Retention > 0 {
		timeout = min(timeout, opts.Retention)
	}
	skew := opts.ClockSkew
	if limit := req.CreatedAt.Add(timeout + skew); req.ExpiresAt.After(limit) {
		ps = append(ps, fmt.Sprintf("expires_at %s is more than the rule's timeout %s after created_at %s",
			stamp(req.ExpiresAt), timeout, stamp(req.CreatedAt)))
	}
	if opts.Stored.IsZero() {
		return ps
	}
	if limit := opts.Stored.Add(timeout + skew); req.ExpiresAt.After(limit) {
		ps = append(ps, fmt.Sprintf("expires_at %s is more than the rule's timeout %s after the request was stored at %s",
			stamp(req.ExpiresAt), timeout, stamp(opts.Stored)))
	}
	approves := req.OnTimeout == contracts.OnTimeoutApprove && req.Kind != contracts.KindHumanInput
	if approves {
		if floor := opts.Stored.Add(timeout - skew); req.ExpiresAt.Before(floor) {
			ps = append(ps, fmt.Sprintf("expires_at %s approves on timeout sooner than the rule's timeout %s after the request was stored at %s",
				stamp(req.ExpiresAt), timeout, stamp(opts.Stored)))
		}
	}
	if approves || len(req.Escalation) > 0 {
		if off := req.CreatedAt.Sub(opts.Stored); off > skew || off < -skew {
			ps = append(ps, fmt.Sprintf("created_at %s is %s away from when the request was stored (%s); timers count from it",
				stamp(req.CreatedAt), off.Round(time.Second), stamp(opts.Stored)))
		}
	}
	return ps
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// checkSensitive requires the snapshot to mask at least the argument values
// the rule's patterns name and the snapshot's tool schema marks.
func checkSensitive(req *contracts.ApprovalRequested, d Decision) []string {
	if req.ToolCall == nil {
		return nil
	}
	var ps []string
	for _, p := range d.SensitivePointers(req.ToolCall.Arguments, req.ToolSchema) {
		if !slices.Contains(req.Sensitive, p) {
			ps = append(ps, fmt.Sprintf("sensitive does not list %q, which the rule or the tool schema masks", p))
		}
	}
	return ps
}
