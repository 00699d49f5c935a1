package policy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/orchestrator/policy"
)

const timersPolicy = `
groups:
  managers: [mia, max]
default_rule:
  reminders: [30m]
  escalation:
    - after: 3h
      approvers: [ops]
  escalation_repeat: 1
risk_defaults:
  high:
    reminders: [15m, 45m]
    escalation:
      - after: 1h
        approvers: ["group:managers"]
        channels: [email]
rules:
  - name: own
    tools: [own]
    action: require_approval
    risk: high
    channels: [slack]
    reminders: [10m, 1h]
    escalation:
      - after: 2h
        approvers: ["group:managers", cfo]
      - after: 4h
        approvers: [cfo]
        channels: ["webhook:pager"]
    escalation_repeat: 0
  - name: high
    tools: [high]
    action: require_approval
    risk: high
  - name: medium
    tools: [medium]
    action: require_approval
  - name: off
    tools: ["off"]
    action: require_approval
    reminders: []
    escalation: []
`

func tier(after time.Duration, approvers, channels []string) policy.EscalationTier {
	return policy.EscalationTier{After: after, Approvers: approvers, Channels: channels}
}

func equalTiers(a, b []policy.EscalationTier) bool {
	return slices.EqualFunc(a, b, func(x, y policy.EscalationTier) bool {
		return x.After == y.After && slices.Equal(x.Approvers, y.Approvers) && slices.Equal(x.Channels, y.Channels)
	})
}

func formatTiers(ts []policy.EscalationTier) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, fmt.Sprintf("{%s %v %v}", t.After, t.Approvers, t.Channels))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// TestTimersPrecedence checks that reminders, escalation and
// escalation_repeat each come from the first layer that sets them: the
// rule, then risk_defaults for its risk, then default_rule.
func TestTimersPrecedence(t *testing.T) {
	src := []byte(timersPolicy)
	if ps := policy.Lint(src); len(ps) > 0 {
		t.Fatalf("Lint: %v", ps)
	}
	p := mustParse(t, timersPolicy)
	h := time.Hour
	tests := []struct {
		tool       string
		reminders  []time.Duration
		escalation []policy.EscalationTier
	}{
		// All three from the rule; tiers without channels get the rule's;
		// groups resolved. The rule's escalation_repeat: 0 beats
		// default_rule's 1.
		{"own", []time.Duration{10 * time.Minute, h}, []policy.EscalationTier{
			tier(2*h, []string{"mia", "max", "cfo"}, []string{"slack"}),
			tier(4*h, []string{"cfo"}, []string{"webhook:pager"}),
		}},
		// Reminders and tiers from risk_defaults.high, the repeat from
		// default_rule.
		{"high", []time.Duration{15 * time.Minute, 45 * time.Minute}, []policy.EscalationTier{
			tier(h, []string{"mia", "max"}, []string{"email"}),
			tier(2*h, []string{"mia", "max"}, []string{"email"}),
		}},
		// Medium has no risk defaults: everything from default_rule.
		{"medium", []time.Duration{30 * time.Minute}, []policy.EscalationTier{
			tier(3*h, []string{"ops"}, nil),
			tier(6*h, []string{"ops"}, nil),
		}},
		// Empty lists turn off what the lower layers set.
		{"off", nil, nil},
		{"unmatched", []time.Duration{30 * time.Minute}, []policy.EscalationTier{
			tier(3*h, []string{"ops"}, nil),
			tier(6*h, []string{"ops"}, nil),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			d := p.Evaluate(call("a", tt.tool))
			if !slices.Equal(d.Reminders, tt.reminders) {
				t.Errorf("reminders %v, want %v", d.Reminders, tt.reminders)
			}
			if !equalTiers(d.Escalation, tt.escalation) {
				t.Errorf("escalation %s, want %s", formatTiers(d.Escalation), formatTiers(tt.escalation))
			}
		})
	}
}

// TestEscalationRepeat checks that the ladder runs again escalation_repeat
// times, each run starting at the last tier's after, and that tiers at or
// past the timeout are left out.
func TestEscalationRepeat(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name    string
		repeat  int
		timeout string
		want    []time.Duration
		warning string // "" for none
	}{
		{"no repeat", 0, "24h", []time.Duration{h, 2 * h}, ""},
		{"twice more", 2, "24h", []time.Duration{h, 2 * h, 3 * h, 4 * h, 5 * h, 6 * h}, ""},
		{"cut by the timeout", 2, "5h", []time.Duration{h, 2 * h, 3 * h, 4 * h}, "2 escalation tiers, from the one after 5h on, never fire"},
		{"cut between tiers", 2, "150m", []time.Duration{h, 2 * h}, "4 escalation tiers, from the one after 3h on, never fire"},
		{"a tier at the timeout", 0, "2h", []time.Duration{h}, "the escalation tier after 2h never fires"},
		{"every tier cut", 1, "1h", nil, "4 escalation tiers, from the one after 1h on, never fire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fmt.Sprintf(`rules:
  - name: r
    tools: [t]
    action: require_approval
    approvers: [a]
    timeout: %s
    escalation:
      - {after: 1h, approvers: [b]}
      - {after: 2h, approvers: [c]}
    escalation_repeat: %d
`, tt.timeout, tt.repeat)
			d := mustParse(t, src).Evaluate(call("x", "t"))
			var got []time.Duration
			for i, tr := range d.Escalation {
				got = append(got, tr.After)
				if want := []string{"b", "c"}[i%2]; !slices.Equal(tr.Approvers, []string{want}) {
					t.Errorf("tier %d approvers %v, want [%s]", i, tr.Approvers, want)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("tiers after %v, want %v", got, tt.want)
			}
			var warnings []string
			for _, pr := range policy.Lint([]byte(src)) {
				warnings = append(warnings, pr.Message)
			}
			switch {
			case tt.warning == "" && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tt.warning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tt.warning)):
				t.Errorf("warnings %q, want one with %q", warnings, tt.warning)
			}
		})
	}
}

// TestTimerProblems lists every error and warning about reminders and
// escalation, each with its position.
func TestTimerProblems(t *testing.T) {
	rule := func(extra string) string {
		return "rules:\n  - name: r\n    tools: [a]\n    action: require_approval\n" + extra
	}
	eleven := func(f func(i int) string) string {
		var parts []string
		for i := 1; i <= 11; i++ {
			parts = append(parts, f(i))
		}
		return strings.Join(parts, ", ")
	}
	type want struct {
		line, col int
		severity  string
		message   string // substring
	}
	e := func(line, col int, msg string) want { return want{line, col, policy.SeverityError, msg} }
	w := func(line, col int, msg string) want { return want{line, col, policy.SeverityWarning, msg} }
	tests := []struct {
		name string
		src  string
		want []want // exactly these problems, in order
	}{
		// reminders
		{"reminder not a duration", rule("    reminders: [10m, soon]\n"), []want{e(5, 22, `reminders[1]: invalid duration "soon"`)}},
		{"reminder zero", rule("    reminders: [0s]\n"), []want{e(5, 17, "reminders[0]: 0s must be positive")}},
		{"reminder negative", rule("    reminders: [-5m]\n"), []want{e(5, 17, "reminders[0]: -5m must be positive")}},
		{"reminders decreasing", rule("    reminders: [1h, 30m]\n"), []want{e(5, 21, "reminders[1]: 30m is not after the reminder before it (1h)")}},
		{"reminders repeated", rule("    reminders: [1h, 60m]\n"), []want{e(5, 21, "reminders[1]: 60m is not after the reminder before it (1h)")}},
		{"too many reminders", rule("    reminders: [" + eleven(func(i int) string { return fmt.Sprintf("%dm", i) }) + "]\n"),
			[]want{e(5, 58, "reminders: at most 10 reminders")}},
		{"reminders not a list", rule("    reminders: 10m\n"), []want{e(5, 16, "reminders must be a list of durations")}},
		{"reminder at the timeout", rule("    timeout: 1h\n    reminders: [30m, 1h, 2h]\n"), []want{
			w(6, 22, "reminders[1]: 1h never fires: the request expires first (timeout 1h)"),
			w(6, 26, "reminders[2]: 2h never fires"),
		}},
		{"inherited reminder after the timeout", "default_rule:\n  reminders: [2h]\n" + rule("    timeout: 1h\n"), []want{
			w(4, 5, `rule "r": reminders 2h (from default_rule) never fire: the request expires first (timeout 1h)`),
		}},
		// escalation
		{"escalation not a list", rule("    escalation: {after: 1h, approvers: [b]}\n"), []want{e(5, 17, "escalation must be a list of tiers")}},
		{"tier not a mapping", rule("    escalation: [2h]\n"), []want{e(5, 18, "escalation[0] must be a mapping with after and approvers")}},
		{"tier without after", rule("    escalation:\n      - approvers: [b]\n"), []want{e(6, 9, "escalation[0]: after is required")}},
		{"tier without approvers", rule("    escalation:\n      - after: 1h\n"), []want{e(6, 9, "escalation[0]: approvers is required")}},
		{"tier with no approvers", rule("    escalation:\n      - after: 1h\n        approvers: []\n"), []want{e(7, 20, "escalation[0].approvers is empty")}},
		{"tier approver twice", rule("    escalation:\n      - after: 1h\n        approvers: [b, b]\n"), []want{e(7, 24, `escalation[0].approvers[1]: "b" is listed twice`)}},
		{"tier group without name", rule("    escalation:\n      - after: 1h\n        approvers: [\"group:\"]\n"), []want{e(7, 21, "escalation[0].approvers[0]: group name missing")}},
		{"tier after not a duration", rule("    escalation:\n      - after: later\n        approvers: [b]\n"), []want{e(6, 16, `escalation[0].after: invalid duration "later"`)}},
		{"tier after zero", rule("    escalation:\n      - after: 0s\n        approvers: [b]\n"), []want{e(6, 16, "escalation[0].after: 0s must be positive")}},
		{"tiers out of order", rule("    escalation:\n      - {after: 2h, approvers: [b]}\n      - {after: 1h, approvers: [c]}\n"),
			[]want{e(7, 17, "escalation[1].after: 1h is not after the tier before it (2h)")}},
		{"tiers at the same time", rule("    escalation:\n      - {after: 1h, approvers: [b]}\n      - {after: 60m, approvers: [c]}\n"),
			[]want{e(7, 17, "escalation[1].after: 60m is not after the tier before it (1h)")}},
		{"too many tiers", rule("    escalation: [" + eleven(func(i int) string { return fmt.Sprintf("{after: %dh, approvers: [b]}", i) }) + "]\n"),
			[]want{e(5, 309, "escalation: at most 10 tiers")}},
		{"unknown tier field", rule("    escalation:\n      - after: 1h\n        approvers: [b]\n        chanels: [email]\n"),
			[]want{e(8, 9, `unknown field "chanels" in rule "r": escalation[0]; did you mean "channels"?`)}},
		{"bad tier channel", rule("    escalation:\n      - after: 1h\n        approvers: [b]\n        channels: [email, \"sms:+15551234\"]\n"),
			[]want{e(8, 27, `rule "r": escalation[0]: channel "sms:+15551234": unknown channel "sms"`)}},
		{"tier key twice", rule("    escalation:\n      - after: 1h\n        after: 2h\n        approvers: [b]\n"),
			[]want{e(7, 9, `"after" is set twice`)}},
		{"unknown group in a tier", "groups: {managers: [mia]}\n" + rule("    escalation:\n      - after: 1h\n        approvers: [\"group:managers\", \"group:manegers\"]\n"),
			[]want{w(8, 39, `rule "r": escalation[0].approvers: unknown approver group "manegers" (define it under groups:)`)}},
		{"tier after the timeout", rule("    timeout: 2h\n    escalation:\n      - {after: 1h, approvers: [b]}\n      - {after: 3h, approvers: [c]}\n"),
			[]want{w(8, 17, `rule "r": the escalation tier after 3h never fires: the request expires first (timeout 2h)`)}},
		{"repeat past the timeout", rule("    timeout: 3h\n    escalation:\n      - {after: 1h, approvers: [b]}\n    escalation_repeat: 5\n"),
			[]want{w(8, 24, `rule "r": 4 escalation tiers, from the one after 3h on, never fire`)}},
		{"inherited tier after the timeout", "default_rule:\n  escalation: [{after: 3h, approvers: [b]}]\n" + rule("    timeout: 2h\n"),
			[]want{w(4, 5, `rule "r": the escalation tier after 3h (from default_rule) never fires`)}},
		// escalation_repeat
		{"repeat too big", rule("    escalation: [{after: 1h, approvers: [b]}]\n    escalation_repeat: 10\n"), []want{e(6, 24, "escalation_repeat 10: must be 0 to 9")}},
		{"repeat negative", rule("    escalation: [{after: 1h, approvers: [b]}]\n    escalation_repeat: -1\n"), []want{e(6, 24, "escalation_repeat -1: must be 0 to 9")}},
		{"repeat not a number", rule("    escalation_repeat: twice\n"), []want{e(5, 24, "escalation_repeat must be a whole number")}},
		{"repeat without tiers", rule("    escalation_repeat: 2\n"), []want{w(5, 24, `rule "r": escalation_repeat has no effect: there are no escalation tiers to repeat`)}},
		{"default repeat for tiers elsewhere", "default_rule: {escalation_repeat: 2}\nrisk_defaults:\n  high: {escalation: [{after: 1h, approvers: [b]}]}\n" +
			rule("    risk: high\n"), nil},
		{"default repeat that nothing uses", "default_rule: {escalation_repeat: 2}\n", []want{w(1, 35, "default_rule: escalation_repeat has no effect")}},
		// with other settings
		{"timers on a rule that allows", "rules:\n  - name: r\n    tools: [a]\n    action: allow\n    reminders: [1h]\n    escalation: [{after: 1h, approvers: [b]}]\n    escalation_repeat: 1\n", []want{
			w(5, 5, `rule "r": reminders has no effect on a rule whose action is allow`),
			w(6, 5, `rule "r": escalation has no effect`),
			w(7, 5, `rule "r": escalation_repeat has no effect`),
		}},
		{"escalation approvers count for the quorum", rule("    approvers: [a]\n    quorum: 2\n    escalation: [{after: 1h, approvers: [a, b]}]\n"), nil},
		{"unless the tier comes too late", rule("    approvers: [a]\n    quorum: 2\n    timeout: 1h\n    escalation: [{after: 1h, approvers: [b]}]\n"), []want{
			e(6, 13, "quorum 2 cannot be met by 1 distinct approvers (a)"),
			w(8, 26, "the escalation tier after 1h never fires"),
		}},
		{"risk_defaults and default_rule take timers", "default_rule:\n  reminders: [1h]\nrisk_defaults:\n  high:\n    escalation: [{after: 1h, approvers: [b], channels: [\"slack:#ops\"]}]\n    escalation_repeat: 1\n    reminders: [2h]\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policy.Lint([]byte(tt.src))
			ok := len(got) == len(tt.want)
			for i := 0; ok && i < len(got); i++ {
				w, g := tt.want[i], got[i]
				ok = g.Line == w.line && g.Column == w.col && g.Severity == w.severity && strings.Contains(g.Message, w.message)
			}
			if !ok {
				t.Errorf("Lint =\n%s\nwant\n%v", format(got), tt.want)
			}
			// Parse refuses exactly when there is an error.
			_, err := policy.Parse([]byte(tt.src))
			hasError := slices.ContainsFunc(tt.want, func(w want) bool { return w.severity == policy.SeverityError })
			if (err != nil) != hasError {
				t.Errorf("Parse error %v, want one: %v", err, hasError)
			}
		})
	}
}

// TestTimersReturnCopies checks that a caller changing a decision's
// reminders or tiers does not change the policy.
func TestTimersReturnCopies(t *testing.T) {
	p := mustParse(t, timersPolicy)
	d := p.Evaluate(call("a", "own"))
	d.Reminders[0] = time.Second
	d.Escalation[0].After = time.Second
	d.Escalation[0].Approvers[0] = "mallory"
	d.Escalation[0].Channels[0] = "nowhere"
	_ = append(d.Escalation[0].Approvers, "eve") // must not spill into the channels
	again := p.Evaluate(call("a", "own"))
	if again.Reminders[0] != 10*time.Minute || again.Escalation[0].After != 2*time.Hour ||
		again.Escalation[0].Approvers[0] != "mia" || again.Escalation[0].Channels[0] != "slack" {
		t.Fatalf("mutating a decision changed the policy: %+v", again)
	}
	if d.Escalation[0].Channels[0] != "nowhere" {
		t.Fatalf("append to a tier's approvers overwrote its channels: %+v", d.Escalation[0])
	}
	// The repeated tiers of a ladder do not share their lists either.
	d = p.Evaluate(call("a", "high"))
	d.Escalation[0].Approvers[0] = "mallory"
	if d.Escalation[1].Approvers[0] != "mia" {
		t.Fatalf("repeated tiers share approvers: %s", formatTiers(d.Escalation))
	}
}

// TestExplainTimers checks that the deciding step says when the request
// reminds and escalates.
func TestExplainTimers(t *testing.T) {
	p := mustParse(t, timersPolicy)
	tests := []struct {
		tool, why string
	}{
		{"own", "tool own matches own; reminders at 10m, 1h; escalation at 2h to mia, max, cfo (slack), at 4h to cfo (webhook:pager)"},
		{"off", "tool off matches off"},
		{"unmatched", "no rule matched; the default is require_approval; reminders at 30m; escalation at 3h to ops, at 6h to ops"},
	}
	for _, tt := range tests {
		_, steps := p.Explain(call("a", tt.tool))
		if got := steps[len(steps)-1].Why; got != tt.why {
			t.Errorf("%s: why %q,\nwant %q", tt.tool, got, tt.why)
		}
	}
	// A long ladder is cut short.
	p = mustParse(t, "rules:\n  - name: r\n    tools: [t]\n    action: require_approval\n    escalation: [{after: 1h, approvers: [b]}]\n    escalation_repeat: 9\n")
	_, steps := p.Explain(call("a", "t"))
	if want := "tool t matches t; escalation at 1h to b, at 2h to b, at 3h to b, at 4h to b, and 6 more tiers up to 10h"; steps[0].Why != want {
		t.Errorf("why %q,\nwant %q", steps[0].Why, want)
	}
}

// TestPaymentsExampleTimers checks the timers the payments example shows.
func TestPaymentsExampleTimers(t *testing.T) {
	p, err := policy.Load("../../deploy/policies/payments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := p.Evaluate(callArgs("prod-eu", "payments.send", `{"amount": 250, "currency": "EUR", "recipient": "ACME", "recipient_country": "DE"}`))
	if d.Rule != "large-in-production" {
		t.Fatalf("rule %q, want large-in-production", d.Rule)
	}
	if want := []time.Duration{30 * time.Minute, 2 * time.Hour}; !slices.Equal(d.Reminders, want) {
		t.Errorf("reminders %v, want %v", d.Reminders, want)
	}
	if want := []policy.EscalationTier{tier(time.Hour, []string{"dana", "erik"}, []string{"email"})}; !equalTiers(d.Escalation, want) {
		t.Errorf("escalation %s, want %s", formatTiers(d.Escalation), formatTiers(want))
	}
}
