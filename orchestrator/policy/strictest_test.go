package policy

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// gate is a require_approval decision with the built-in settings.
func gate(rule string, change func(*Decision)) Decision {
	d := Decision{
		Action: ActionRequireApproval, Rule: rule, Risk: contracts.RiskMedium, Quorum: 1, Veto: true,
		Order: contracts.OrderAny, Timeout: DefaultTimeout, OnTimeout: contracts.OnTimeoutReject,
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
	}
	if change != nil {
		change(&d)
	}
	return d
}

func TestStrictest(t *testing.T) {
	allow := Decision{Action: ActionAllow, Rule: "ok"}
	deny := Decision{Action: ActionDeny, Rule: "no", Reason: "No."}
	grants := func(ttl, args string, scopes ...string) *contracts.GrantLimits {
		return &contracts.GrantLimits{Scopes: scopes, MaxTTL: ttl, Arguments: args}
	}
	tests := []struct {
		name string
		a, b Decision
		want Decision
	}{
		{"deny beats a gate", gate("g", nil), deny, deny},
		{"deny beats allow", allow, deny, deny},
		{"a gate beats allow", allow, gate("g", nil), gate("g", nil)},
		{"two denies: the first", deny, Decision{Action: ActionDeny, Rule: "no2", Reason: "Never."}, deny},
		{"two allows: the first", allow, Decision{Action: ActionAllow, Rule: "ok2", Receipt: true}, allow},
		{
			"named approvers beat anyone, and keep their rule",
			gate("anyone", func(d *Decision) { d.Quorum = 2; d.Risk = contracts.RiskCritical }),
			gate("named", func(d *Decision) { d.Approvers = []string{"x", "y"} }),
			gate("named", func(d *Decision) {
				d.Approvers = []string{"x", "y"}
				d.Quorum, d.Risk = 2, contracts.RiskCritical
			}),
		},
		{
			"2 of anyone and 1 of {x} give 2 of {x}: it cannot be approved (fails closed)",
			gate("anyone", func(d *Decision) { d.Quorum = 2 }),
			gate("named", func(d *Decision) { d.Approvers = []string{"x"} }),
			gate("named", func(d *Decision) { d.Approvers, d.Quorum = []string{"x"}, 2 }),
		},
		{
			"both named: the higher quorum's approvers",
			gate("finance", func(d *Decision) { d.Approvers, d.Risk = []string{"alice", "bob"}, contracts.RiskCritical }),
			gate("treasury", func(d *Decision) { d.Approvers, d.Quorum = []string{"dana", "erik"}, 2 }),
			gate("treasury", func(d *Decision) {
				d.Approvers, d.Quorum, d.Risk = []string{"dana", "erik"}, 2, contracts.RiskCritical
			}),
		},
		{
			"both named, same quorum: the higher risk's approvers",
			gate("low", func(d *Decision) { d.Approvers, d.Risk = []string{"a"}, contracts.RiskLow }),
			gate("high", func(d *Decision) { d.Approvers, d.Risk = []string{"b"}, contracts.RiskHigh }),
			gate("high", func(d *Decision) { d.Approvers, d.Risk = []string{"b"}, contracts.RiskHigh }),
		},
		{
			"a tie: the first (the erroring rule, before the rules below it)",
			gate("first", func(d *Decision) { d.Approvers = []string{"a"} }),
			gate("second", func(d *Decision) { d.Approvers = []string{"b"} }),
			gate("first", func(d *Decision) { d.Approvers = []string{"a"} }),
		},
		{
			"veto if either, self-approval if both, sequence if either",
			gate("a", func(d *Decision) { d.Veto, d.AllowSelfApproval = false, true }),
			gate("b", func(d *Decision) { d.Order, d.AllowSelfApproval = contracts.OrderSequence, false }),
			gate("a", func(d *Decision) { d.Veto, d.AllowSelfApproval, d.Order = true, false, contracts.OrderSequence }),
		},
		{
			"reject on timeout if either, and the later deadline",
			gate("a", func(d *Decision) { d.OnTimeout, d.Timeout = contracts.OnTimeoutApprove, 8*time.Hour }),
			gate("b", func(d *Decision) { d.Timeout = time.Hour }),
			gate("a", func(d *Decision) { d.Timeout = 8 * time.Hour }),
		},
		{
			"approve on timeout only if both, at the later deadline",
			gate("a", func(d *Decision) { d.OnTimeout, d.Timeout = contracts.OnTimeoutApprove, time.Hour }),
			gate("b", func(d *Decision) { d.OnTimeout, d.Timeout = contracts.OnTimeoutApprove, 2*time.Hour }),
			gate("a", func(d *Decision) { d.OnTimeout, d.Timeout = contracts.OnTimeoutApprove, 2*time.Hour }),
		},
		{
			"the decisions both allow, in the primary's order",
			gate("a", func(d *Decision) { d.AllowedDecisions = []string{"edit", "approve", "reject"} }),
			gate("b", func(d *Decision) { d.AllowedDecisions = []string{"reject", "approve", "respond"} }),
			gate("a", func(d *Decision) { d.AllowedDecisions = []string{"approve", "reject"} }),
		},
		{
			"no decision in common: the primary's (a gate must allow one)",
			gate("a", func(d *Decision) { d.AllowedDecisions = []string{"respond"}; d.Quorum = 2 }),
			gate("b", func(d *Decision) { d.AllowedDecisions = []string{"edit"} }),
			gate("a", func(d *Decision) { d.AllowedDecisions = []string{"respond"}; d.Quorum = 2 }),
		},
		{
			"channels and sensitive values of both, reminders of both before the deadline",
			gate("a", func(d *Decision) {
				d.Channels, d.Sensitive, d.Reminders = []string{"email"}, []string{"/ssn"}, []time.Duration{time.Hour}
				d.Timeout = 2 * time.Hour
			}),
			gate("b", func(d *Decision) {
				d.Channels, d.Sensitive = []string{"slack:#x", "email"}, []string{"/card"}
				d.Reminders, d.Timeout = []time.Duration{30 * time.Minute, 3 * time.Hour}, time.Hour
			}),
			gate("a", func(d *Decision) {
				d.Channels, d.Sensitive = []string{"email", "slack:#x"}, []string{"/ssn", "/card"}
				d.Reminders, d.Timeout = []time.Duration{30 * time.Minute, time.Hour}, 2*time.Hour
			}),
		},
		{
			"grants only as far as both permit",
			gate("a", func(d *Decision) { d.Grants = grants("8h", "condition", "call", "run", "agent") }),
			gate("b", func(d *Decision) { d.Grants = grants("1h", "same", "call", "run") }),
			gate("a", func(d *Decision) { d.Grants = grants("1h", "same", "call", "run") }),
		},
		{
			"no grants where either permits none",
			gate("a", func(d *Decision) { d.Grants = grants("8h", "same", "call", "run") }),
			gate("b", nil),
			gate("a", nil),
		},
		{
			"the first error is kept",
			gate("a", func(d *Decision) { d.Error = "first" }),
			gate("b", func(d *Decision) { d.Error = "second"; d.Quorum = 3 }),
			gate("b", func(d *Decision) { d.Error = "first"; d.Quorum = 3 }),
		},
		{
			"the error is kept when the other side wins the verdict",
			gate("a", func(d *Decision) { d.Error = "oops" }),
			deny,
			Decision{Action: ActionDeny, Rule: "no", Reason: "No.", Error: "oops"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strictest(tt.a, tt.b)
			if !reflect.DeepEqual(normal(got), normal(tt.want)) {
				t.Errorf("strictest\n got  %+v\n want %+v", got, tt.want)
			}
		})
	}
}

// normal makes empty slices nil, for comparisons.
func normal(d Decision) Decision {
	if len(d.Approvers) == 0 {
		d.Approvers = nil
	}
	if len(d.Channels) == 0 {
		d.Channels = nil
	}
	if len(d.Sensitive) == 0 {
		d.Sensitive = nil
	}
	if len(d.Reminders) == 0 {
		d.Reminders = nil
	}
	if len(d.AllowedDecisions) == 0 {
		d.AllowedDecisions = nil
	}
	return d
}

func TestWeakerThan(t *testing.T) {
	base := gate("r", func(d *Decision) {
		d.Approvers, d.Quorum, d.Risk = []string{"a", "b"}, 2, contracts.RiskHigh
		d.Sensitive = []string{"/ssn"}
	})
	tests := []struct {
		name   string
		change func(*Decision)
		want   string // "" when not weaker
	}{
		{"the same", func(*Decision) {}, ""},
		{"allowed", func(d *Decision) { d.Action = ActionAllow }, "verdict allow is weaker than require_approval"},
		{"denied", func(d *Decision) { d.Action = ActionDeny }, ""},
		{"fewer approvals", func(d *Decision) { d.Quorum = 1 }, "quorum 1 < 2"},
		{"more approvals", func(d *Decision) { d.Quorum = 3 }, ""},
		{"lower risk", func(d *Decision) { d.Risk = contracts.RiskMedium }, "risk medium < high"},
		{"no veto", func(d *Decision) { d.Veto = false }, "no veto"},
		{"self-approval", func(d *Decision) { d.AllowSelfApproval = true }, "self-approval allowed"},
		{"approves on timeout", func(d *Decision) { d.OnTimeout = contracts.OnTimeoutApprove }, "approves on timeout"},
		{"rejects sooner", func(d *Decision) { d.Timeout = time.Hour }, ""},
		{"anyone", func(d *Decision) { d.Approvers = nil }, "anyone may approve"},
		{"other named approvers", func(d *Decision) { d.Approvers = []string{"c"} }, ""},
		{"more decisions", func(d *Decision) { d.AllowedDecisions = append(d.AllowedDecisions, "edit") }, "allows decision edit"},
		{"fewer decisions", func(d *Decision) { d.AllowedDecisions = []string{"reject"} }, ""},
		{"unmasked", func(d *Decision) { d.Sensitive = nil }, "shows sensitive /ssn"},
		{"grants", func(d *Decision) { d.Grants = &contracts.GrantLimits{Scopes: []string{"run"}, MaxTTL: "1h"} }, "permits standing grants"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := base.clone()
			tt.change(&d)
			got := strings.Join(d.weakerThan(base), "; ")
			if got != tt.want {
				t.Errorf("weakerThan = %q, want %q", got, tt.want)
			}
		})
	}
	// Where time approves, a sooner deadline is weaker.
	a := gate("a", func(d *Decision) { d.OnTimeout, d.Timeout = contracts.OnTimeoutApprove, time.Hour })
	b := gate("b", func(d *Decision) { d.OnTimeout, d.Timeout = contracts.OnTimeoutApprove, 2*time.Hour })
	if w := a.weakerThan(b); len(w) != 1 || !strings.Contains(w[0], "sooner") {
		t.Errorf("approving sooner: %q", w)
	}
}

// TestStrictestIsNeverWeaker: over random pairs of decisions, the
// combination is at least as strict as each side (weakerThan), whichever
// side comes first, and names one of their rules. The one exception is
// documented: two gates that share no allowed decision keep the primary
// side's.
func TestStrictestIsNeverWeaker(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	pick := func(l ...string) string { return l[rng.IntN(len(l))] }
	random := func(rule string) Decision {
		if n := rng.IntN(10); n == 0 {
			return Decision{Action: ActionAllow, Rule: rule}
		} else if n == 1 {
			return Decision{Action: ActionDeny, Rule: rule, Reason: "no"}
		}
		return gate(rule, func(d *Decision) {
			d.Risk = pick(contracts.RiskLow, contracts.RiskMedium, contracts.RiskHigh, contracts.RiskCritical)
			d.Quorum = 1 + rng.IntN(3)
			d.Veto, d.AllowSelfApproval = rng.IntN(2) == 0, rng.IntN(2) == 0
			d.Order = pick(contracts.OrderAny, contracts.OrderSequence)
			d.OnTimeout = pick(contracts.OnTimeoutReject, contracts.OnTimeoutApprove)
			d.Timeout = time.Duration(1+rng.IntN(4)) * time.Hour
			if rng.IntN(2) == 0 {
				d.Approvers = []string{pick("a", "b"), pick("c", "d")}
			}
			d.AllowedDecisions = nil
			for _, dec := range allDecisions {
				if rng.IntN(3) > 0 {
					d.AllowedDecisions = append(d.AllowedDecisions, dec)
				}
			}
			if rng.IntN(2) == 0 {
				d.Sensitive = []string{pick("/a", "/b")}
			}
			if rng.IntN(2) == 0 {
				d.Grants = &contracts.GrantLimits{Scopes: []string{"call", pick("run", "agent")}, MaxTTL: pick("1h", "2h"), Arguments: pick("same", "condition")}
			}
		})
	}
	for range 20000 {
		a, b := random("a"), random("b")
		for _, pair := range [][2]Decision{{a, b}, {b, a}} {
			got := strictest(pair[0], pair[1])
			disjoint := a.Action == ActionRequireApproval && b.Action == ActionRequireApproval && len(a.AllowedDecisions) > 0 &&
				len(b.AllowedDecisions) > 0 && !slices.ContainsFunc(a.AllowedDecisions, func(d string) bool { return slices.Contains(b.AllowedDecisions, d) })
			for _, side := range pair {
				w := got.weakerThan(side)
				if disjoint {
					w = slices.DeleteFunc(w, func(s string) bool { return strings.HasPrefix(s, "allows decision ") })
				}
				if len(w) > 0 {
					t.Fatalf("strictest(%+v, %+v) = %+v is weaker than %+v: %q", pair[0], pair[1], got, side, w)
				}
			}
			if got.Rule != a.Rule && got.Rule != b.Rule {
				t.Fatalf("strictest names rule %q", got.Rule)
			}
		}
	}
}
