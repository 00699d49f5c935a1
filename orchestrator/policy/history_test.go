package policy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

const historyPolicy = `version: history-1
default: require_approval
rules:
  - name: no-pay-without-balance
    tools: [payments.send]
    when: '!history.run.approved("balance.check", duration("1h"))'
    action: deny
    reason: "Check the balance first."
  - name: busy-payer
    tools: ["payments.*"]
    when: 'history.count("payments.send", duration("1h")) >= 5 || history.tenant.sum("payments.*", "amount", duration("24h")) + double(args.amount) > 10000.0'
    action: require_approval
    risk: high
    quorum: 2
    approvers: [alice, bob]
  - name: small
    tools: ["payments.*"]
    action: allow
`

// fixedHistory answers from a table, and errors for a query it lacks.
type fixedHistory map[string]float64

func (h fixedHistory) Figure(q policy.HistoryQuery) (float64, error) {
	v, ok := h[q.String()]
	if !ok {
		return 0, errors.New("not known")
	}
	return v, nil
}

const (
	qApproved = `history.run.approved("balance.check", duration("1h0m0s"))`
	qCount    = `history.count("payments.send", duration("1h0m0s"))`
	qSum      = `history.tenant.sum("payments.*", "amount", duration("24h0m0s"))`
)

// TestHistoryConditions: the history functions read their scope's
// figures; a figure that cannot be had errors the condition, and the call
// gets the strictest of the rules it could fall under.
func TestHistoryConditions(t *testing.T) {
	p, err := policy.Parse([]byte(historyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in := func(h policy.History) policy.Input {
		return policy.Input{Run: contracts.Run{ID: "r1", Agent: "payer", Tenant: "acme"}, Tool: "payments.send",
			Arguments: []byte(`{"amount": 100}`), History: h}
	}
	cases := []struct {
		name   string
		h      policy.History
		action string
		rule   string
		errs   bool
	}{
		{"quiet", fixedHistory{qApproved: 1, qCount: 4, qSum: 9000}, policy.ActionAllow, "small", false},
		{"fifth", fixedHistory{qApproved: 1, qCount: 5, qSum: 0}, policy.ActionRequireApproval, "busy-payer", false},
		{"sum", fixedHistory{qApproved: 1, qCount: 0, qSum: 9901}, policy.ActionRequireApproval, "busy-payer", false},
		{"no balance check", fixedHistory{qApproved: 0, qCount: 0, qSum: 0}, policy.ActionDeny, "no-pay-without-balance", false},
		{"count unknown", fixedHistory{qApproved: 1, qSum: 0}, policy.ActionRequireApproval, "busy-payer", true},
		{"no history", nil, policy.ActionDeny, "no-pay-without-balance", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Evaluate(in(c.h))
			if d.Action != c.action || d.Rule != c.rule || (d.Error != "") != c.errs {
				t.Errorf("got %s by %s (error %q), want %s by %s (error %v)", d.Action, d.Rule, d.Error, c.action, c.rule, c.errs)
			}
		})
	}
	u := p.HistoryUse()
	if len(u.Queries) != 3 || u.Window != 24*time.Hour || !slices.Equal(u.Fields, []string{"amount"}) || u.Scope != contracts.HistoryScopeTenant {
		t.Errorf("HistoryUse = %+v", u)
	}
	var got []string
	for _, q := range u.Queries {
		got = append(got, q.String())
	}
	if want := []string{qApproved, qCount, qSum}; !slices.Equal(got, want) {
		t.Errorf("queries = %q, want %q", got, want)
	}
}

// TestHistoryArgumentsAreLiterals: a history function takes literal tools,
// field and window, within MaxHistoryWindow; anything else is refused with
// its place.
func TestHistoryArgumentsAreLiterals(t *testing.T) {
	for _, c := range []struct{ when, want string }{
		{`history.count(tool, duration("1h")) > 1`, "literal glob"},
		{`history.count("x", duration(tool)) > 1`, "literal duration"},
		{`history.sum("x", tool, duration("1h")) > 1.0`, "literal argument name"},
		{`history.count("x", duration("800h")) > 1`, "at most 720h"},
		{`history.count("x", duration("-1h")) > 1`, "positive"},
		{`history.sum("x", "/a~2", duration("1h")) > 1.0`, "JSON pointer"},
		{`history.nope.count("x", duration("1h")) > 1`, "does not support field selection"},
	} {
		src := "version: v\ndefault: deny\nrules:\n  - name: r\n    when: '" + c.when + "'\n    action: allow\n"
		_, err := policy.Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.when, err, c.want)
		}
	}
	p, err := policy.Parse([]byte("version: v\ndefault: deny\nrules:\n  - name: r\n    when: 'history.agent.count(\"x\", duration(\"90m\")) > 1 && history.run.count(\"y\", duration(\"1m\")) < 3'\n    action: allow\n"))
	if err != nil {
		t.Fatal(err)
	}
	if u := p.HistoryUse(); u.Scope != contracts.HistoryScopeTenant || u.Window != 90*time.Minute {
		t.Errorf("agent and run read together need the tenant's view: %+v", u)
	}
}

// TestVerifyRequestWithHistoryFigures: the arbiter decides a request with
// the figures it carries. The honest request is accepted; one whose figures
// are missing or impossible gets the strictest rule, and a weaker snapshot
// is refused.
func TestVerifyRequestWithHistoryFigures(t *testing.T) {
	p, err := policy.Parse([]byte(historyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	rec := &policy.Recorder{H: fixedHistory{qApproved: 1, qCount: 5, qSum: 0}}
	in := policy.Input{Run: contracts.Run{ID: "r1", Agent: "payer", Tenant: "acme"}, Tool: "payments.send",
		Arguments: []byte(`{"amount":100}`), History: rec}
	d := p.Evaluate(in)
	if d.Rule != "busy-payer" {
		t.Fatalf("rule %s", d.Rule)
	}
	now := time.Now().UTC()
	req := &contracts.ApprovalRequested{
		Kind: contracts.KindToolApproval, Run: in.Run,
		ToolCall:  &contracts.ToolCall{Name: in.Tool, Arguments: in.Arguments},
		Policy:    contracts.PolicyRef{Rule: d.Rule, Version: d.Version},
		Quorum:    contracts.Quorum{Required: 2, Approvers: []string{"alice", "bob"}, Veto: true},
		OnTimeout: contracts.OnTimeoutReject, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		AllowedDecisions: d.AllowedDecisions, History: rec.Figures(),
	}
	check := func() error {
		return policy.VerifyRequest(req, p.Evaluate(policy.RequestInput(req)), policy.VerifyOptions{})
	}
	if err := check(); err != nil {
		t.Fatalf("honest request refused: %v", err)
	}
	if len(req.History) != 2 {
		t.Errorf("figures = %+v, want the two the evaluation read", req.History)
	}
	// Without the figures the conditions error: the strictest rule, a
	// deny, refuses the request.
	req.History = nil
	if err := check(); err == nil || !strings.Contains(err.Error(), contracts.RefusalNotGated) {
		t.Errorf("request without figures: %v", err)
	}
	for _, bad := range []float64{-1, 2.5} {
		req.History = []contracts.HistoryFigure{{Scope: "run", Func: "approved", Tools: "balance.check", Window: "1h0m0s", Value: 1},
			{Scope: "agent", Func: "count", Tools: "payments.send", Window: "1h0m0s", Value: bad}}
		if d := p.Evaluate(policy.RequestInput(req)); d.Error == "" || d.Action == policy.ActionAllow {
			t.Errorf("count %v: %s by %s", bad, d.Action, d.Rule)
		}
	}
}
