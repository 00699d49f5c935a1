package policy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// orderPolicy has overlapping rules, so the order decides: the narrower rules
// come first and the broad ones after them.
const orderPolicy = `
version: "v7"
rules:
  - name: ops-may-restart
    tools: ["db.restart"]
    agents: ["ops-*"]
    action: allow
  - name: db-writes
    tools: ["db.delete*", "db.update*", "db.restart"]
    action: require_approval
    risk: critical
    approvers: [alice, bob, carol]
    quorum: 2
    veto: false
    allow_self_approval: true
    order: sequence
    timeout: 90m
    on_timeout: approve
    allowed_decisions: [approve, reject, edit]
    channels: [slack, email]
    summary: "{{tool}} on {{args.table}}"
  - name: db-reads
    tools: ["db.*"]
    action: allow
  - name: no-shell
    tools: ["shell.*", "exec"]
    action: deny
    reason: "No shell for agents."
  - name: no-reason
    tools: ["rm"]
    action: deny
  - name: single-char
    tools: ["tool-?"]
    agents: ["bot-?", "batch"]
    action: allow
`

func mustParse(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// call is a call of tool by agent with no arguments.
func call(agent, tool string) policy.Input {
	return policy.Input{Run: contracts.Run{Agent: agent}, Tool: tool}
}

// callArgs is a call with arguments in a tenant.
func callArgs(tenant, tool, args string) policy.Input {
	return policy.Input{Run: contracts.Run{Agent: "agent", Tenant: tenant}, Tool: tool, Arguments: json.RawMessage(args)}
}

func TestEvaluateFirstMatchWins(t *testing.T) {
	p := mustParse(t, orderPolicy)
	tests := []struct {
		agent, tool string
		action      string
		rule        string
		reason      string
	}{
		// The agent-scoped rule comes first and wins for ops agents only.
		{"ops-bot", "db.restart", policy.ActionAllow, "ops-may-restart", ""},
		{"sales-bot", "db.restart", policy.ActionRequireApproval, "db-writes", ""},
		// db-writes precedes the broader db.* allow.
		{"sales-bot", "db.delete_rows", policy.ActionRequireApproval, "db-writes", ""},
		{"sales-bot", "db.update", policy.ActionRequireApproval, "db-writes", ""},
		{"sales-bot", "db.select", policy.ActionAllow, "db-reads", ""},
		// A prefix glob needs the prefix: "db" alone and "dbx.select" miss it.
		{"sales-bot", "db", policy.ActionRequireApproval, "default", ""},
		{"sales-bot", "dbx.select", policy.ActionRequireApproval, "default", ""},
		// '*' also crosses dots.
		{"sales-bot", "db.a.b.c", policy.ActionAllow, "db-reads", ""},
		{"sales-bot", "shell.exec", policy.ActionDeny, "no-shell", "No shell for agents."},
		{"sales-bot", "exec", policy.ActionDeny, "no-shell", "No shell for agents."},
		{"sales-bot", "exec2", policy.ActionRequireApproval, "default", ""},
		{"sales-bot", "rm", policy.ActionDeny, "no-reason", `Policy rule "no-reason" denies this tool.`},
		// '?' is exactly one character, in tool and agent globs alike.
		{"bot-1", "tool-a", policy.ActionAllow, "single-char", ""},
		{"batch", "tool-a", policy.ActionAllow, "single-char", ""},
		{"bot-12", "tool-a", policy.ActionRequireApproval, "default", ""},
		{"bot-1", "tool-ab", policy.ActionRequireApproval, "default", ""},
		{"bot-1", "tool-", policy.ActionRequireApproval, "default", ""},
		// Matching is case-sensitive.
		{"sales-bot", "Shell.exec", policy.ActionRequireApproval, "default", ""},
		// Unknown tools fail closed.
		{"sales-bot", "unknown", policy.ActionRequireApproval, "default", ""},
		{"", "", policy.ActionRequireApproval, "default", ""},
	}
	for _, tt := range tests {
		t.Run(tt.agent+"/"+tt.tool, func(t *testing.T) {
			// Twice: the second time the tool's candidate rules come from
			// the policy's index.
			for range 2 {
				d := p.Evaluate(call(tt.agent, tt.tool))
				if d.Action != tt.action || d.Rule != tt.rule || d.Reason != tt.reason {
					t.Errorf("Evaluate(%q, %q) = {%s %s %q}, want {%s %s %q}",
						tt.agent, tt.tool, d.Action, d.Rule, d.Reason, tt.action, tt.rule, tt.reason)
				}
				if d.Version != "v7" {
					t.Errorf("Version = %q, want v7", d.Version)
				}
				if d.Error != "" {
					t.Errorf("Error = %q", d.Error)
				}
			}
			// Explain decides the same, and its last step is the decider.
			d, steps := p.Explain(call(tt.agent, tt.tool))
			if d.Action != tt.action || d.Rule != tt.rule {
				t.Errorf("Explain decided {%s %s}", d.Action, d.Rule)
			}
			if last := steps[len(steps)-1]; last.Rule != tt.rule || !last.Matched {
				t.Errorf("last step %+v, want the deciding rule %s", last, tt.rule)
			}
		})
	}
}

func TestEvaluateGateSettings(t *testing.T) {
	p := mustParse(t, orderPolicy)

	got := p.Evaluate(call("sales-bot", "db.delete"))
	want := policy.Decision{
		Action: policy.ActionRequireApproval, Rule: "db-writes", Version: "v7", Line: 8,
		Risk: contracts.RiskCritical, Approvers: []string{"alice", "bob", "carol"}, Quorum: 2,
		Veto: false, AllowSelfApproval: true, Order: contracts.OrderSequence, Timeout: 90 * time.Minute,
		OnTimeout:        contracts.OnTimeoutApprove,
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit},
		Channels:         []string{"slack", "email"}, Summary: "{{tool}} on {{args.table}}",
	}
	assertDecision(t, got, want)

	// The default says nothing: the safe settings.
	got = p.Evaluate(call("sales-bot", "unknown"))
	want = policy.Decision{
		Action: policy.ActionRequireApproval, Rule: "default", Version: "v7",
		Risk: contracts.RiskMedium, Quorum: 1, Veto: true, Order: contracts.OrderAny, Timeout: policy.DefaultTimeout,
		OnTimeout:        contracts.OnTimeoutReject,
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
	}
	assertDecision(t, got, want)
}

func assertDecision(t *testing.T, got, want policy.Decision) {
	t.Helper()
	if got.Action != want.Action || got.Rule != want.Rule || got.Version != want.Version || got.Line != want.Line ||
		got.Reason != want.Reason || got.Error != want.Error || got.Risk != want.Risk || got.Quorum != want.Quorum ||
		got.Veto != want.Veto || got.AllowSelfApproval != want.AllowSelfApproval || got.Order != want.Order ||
		got.Timeout != want.Timeout || got.OnTimeout != want.OnTimeout || got.Summary != want.Summary ||
		!slices.Equal(got.Approvers, want.Approvers) || !slices.Equal(got.AllowedDecisions, want.AllowedDecisions) ||
		!slices.Equal(got.Channels, want.Channels) {
		t.Errorf("decision\n got  %+v\n want %+v", got, want)
	}
}

func TestEvaluateReturnsCopies(t *testing.T) {
	p := mustParse(t, orderPolicy)
	d := p.Evaluate(call("sales-bot", "db.delete"))
	d.Approvers[0] = "mallory"
	d.AllowedDecisions[0] = "edit"
	d.Channels[0] = "nowhere"
	_ = append(d.Approvers, "eve") // must not spill into the next slice
	again := p.Evaluate(call("sales-bot", "db.delete"))
	if again.Approvers[0] != "alice" || again.AllowedDecisions[0] != "approve" || again.Channels[0] != "slack" {
		t.Fatalf("mutating a decision changed the policy: %+v", again)
	}
	if d.AllowedDecisions[0] != "edit" {
		t.Fatalf("append to Approvers overwrote AllowedDecisions: %+v", d)
	}
}

func TestDefaultAction(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		action string
		reason string
	}{
		{"omitted", "rules:\n  - name: a\n    tools: [a]\n    action: allow\n", policy.ActionRequireApproval, ""},
		{"empty string", "default: \"\"\nrules:\n  - name: a\n    tools: [a]\n    action: allow\n", policy.ActionRequireApproval, ""},
		{"no rules", "version: x\n", policy.ActionRequireApproval, ""},
		{"require_approval", "default: require_approval\n", policy.ActionRequireApproval, ""},
		{"allow", "default: allow\n", policy.ActionAllow, ""},
		{"deny", "default: deny\n", policy.ActionDeny, "No policy rule allows this tool."},
		{"deny with reason", "default: deny\ndefault_rule:\n  reason: Ask first.\n", policy.ActionDeny, "Ask first."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.src)
			d := p.Evaluate(call("agent", "unmatched.tool"))
			if d.Action != tt.action || d.Rule != "default" || d.Reason != tt.reason || d.Line != 0 {
				t.Errorf("got {%s %s %q line %d}, want {%s default %q line 0}", d.Action, d.Rule, d.Reason, d.Line, tt.action, tt.reason)
			}
			if p.DefaultAction() != tt.action {
				t.Errorf("DefaultAction() = %q", p.DefaultAction())
			}
		})
	}
}

func TestDefaultRuleSettings(t *testing.T) {
	p := mustParse(t, `
default_rule:
  risk: high
  approvers: [ops]
  timeout: 2h
  channels: [webhook]
  order: sequence
`)
	d := p.Evaluate(call("a", "anything"))
	if d.Action != policy.ActionRequireApproval || d.Risk != contracts.RiskHigh || d.Timeout != 2*time.Hour ||
		!slices.Equal(d.Approvers, []string{"ops"}) || !slices.Equal(d.Channels, []string{"webhook"}) || d.Quorum != 1 ||
		d.Order != contracts.OrderSequence {
		t.Fatalf("default_rule settings not applied: %+v", d)
	}
}

func TestBuiltinDefault(t *testing.T) {
	p := policy.Default()
	d := p.Evaluate(call("any", "tool"))
	want := policy.Decision{
		Action: policy.ActionRequireApproval, Rule: "default", Version: "builtin",
		Risk: contracts.RiskMedium, Quorum: 1, Veto: true, Order: contracts.OrderAny, Timeout: policy.DefaultTimeout,
		OnTimeout:        contracts.OnTimeoutReject,
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
	}
	assertDecision(t, d, want)
	if p.Version() != "builtin" || p.Source() != nil || len(p.RuleNames()) != 0 {
		t.Errorf("Default(): version %q, source %q, rules %v", p.Version(), p.Source(), p.RuleNames())
	}
	if _, steps := p.Explain(call("any", "tool")); len(steps) != 1 || steps[0].Rule != "default" {
		t.Errorf("Explain steps %+v", steps)
	}
}

func TestVersion(t *testing.T) {
	if v := mustParse(t, "version: \"2026-11-23.1\"\n").Version(); v != "2026-11-23.1" {
		t.Errorf("Version() = %q", v)
	}
	// Without a version: a content hash, stable for the same bytes and
	// different for different ones.
	src := "default: deny\n"
	p := mustParse(t, src)
	sum := sha256.Sum256([]byte(src))
	if v, want := p.Version(), "sha-"+hex.EncodeToString(sum[:])[:12]; v != want {
		t.Errorf("Version() = %q, want %q", v, want)
	}
	if p.SHA256() != hex.EncodeToString(sum[:]) {
		t.Errorf("SHA256() = %q", p.SHA256())
	}
	if d := p.Evaluate(call("a", "b")); d.Version != p.Version() {
		t.Errorf("decision version %q", d.Version)
	}
	if v := mustParse(t, "default: deny\n# changed\n").Version(); v == p.Version() {
		t.Errorf("different files, same version %q", v)
	}
	if string(p.Source()) != src {
		t.Errorf("Source() = %q", p.Source())
	}
}

// TestMatching covers every matcher of a rule: tools, agents, tenants,
// labels, alone and together.
func TestMatching(t *testing.T) {
	p := mustParse(t, `
rules:
  - name: prod-eu-billing
    tools: ["payments.*"]
    agents: ["billing-*"]
    tenants: ["prod-eu*"]
    labels: {env: prod, team: finance}
    action: deny
  - name: staging-anything
    tenants: ["staging", "dev-?"]
    action: allow
  - name: only-labels
    labels: {sandbox: "true"}
    action: allow
  - name: only-agents
    agents: [intern-bot]
    action: deny
  - name: everything
    tools: ["*"]
    action: require_approval
    risk: low
`)
	prodLabels := map[string]string{"env": "prod", "team": "finance", "extra": "x"}
	tests := []struct {
		name string
		run  contracts.Run
		tool string
		rule string
	}{
		{"all match", contracts.Run{Agent: "billing-1", Tenant: "prod-eu-2", Labels: prodLabels}, "payments.send", "prod-eu-billing"},
		{"tenant glob misses", contracts.Run{Agent: "billing-1", Tenant: "prod-us", Labels: prodLabels}, "payments.send", "everything"},
		{"empty tenant misses", contracts.Run{Agent: "billing-1", Labels: prodLabels}, "payments.send", "everything"},
		{"a label differs", contracts.Run{Agent: "billing-1", Tenant: "prod-eu", Labels: map[string]string{"env": "prod", "team": "ops"}}, "payments.send", "everything"},
		{"a label is missing", contracts.Run{Agent: "billing-1", Tenant: "prod-eu", Labels: map[string]string{"env": "prod"}}, "payments.send", "everything"},
		{"no labels", contracts.Run{Agent: "billing-1", Tenant: "prod-eu"}, "payments.send", "everything"},
		{"agent misses", contracts.Run{Agent: "support-1", Tenant: "prod-eu", Labels: prodLabels}, "payments.send", "everything"},
		{"tenant only, any tool", contracts.Run{Agent: "x", Tenant: "staging"}, "rm.rf", "staging-anything"},
		{"tenant ? glob", contracts.Run{Agent: "x", Tenant: "dev-7"}, "rm.rf", "staging-anything"},
		{"tenant ? glob misses", contracts.Run{Agent: "x", Tenant: "dev-77"}, "rm.rf", "everything"},
		{"labels only", contracts.Run{Agent: "x", Labels: map[string]string{"sandbox": "true"}}, "rm.rf", "only-labels"},
		{"label values are exact", contracts.Run{Agent: "x", Labels: map[string]string{"sandbox": "True"}}, "rm.rf", "everything"},
		{"agents only", contracts.Run{Agent: "intern-bot"}, "search", "only-agents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := policy.Input{Run: tt.run, Tool: tt.tool}
			if d := p.Evaluate(in); d.Rule != tt.rule {
				t.Errorf("Evaluate: rule %q, want %q", d.Rule, tt.rule)
			}
			if d, _ := p.Explain(in); d.Rule != tt.rule {
				t.Errorf("Explain: rule %q, want %q", d.Rule, tt.rule)
			}
		})
	}
}

// A condition that fails on the values it got says which value had which
// type, not only CEL's "no such overload".
func TestConditionErrorNamesTheArgumentAndItsType(t *testing.T) {
	p := mustParse(t, conditionPolicy)
	tests := []struct {
		name string
		in   policy.Input
		want string
	}{
		{"amount is a string", callArgs("prod", "payments.send", `{"amount": "250"}`),
			`args.amount is a string ("250"), the condition compares it with a number (100) using >`},
		{"missing amount", callArgs("prod", "payments.send", `{"recipient": "x"}`), `args has no field "amount"`},
		{"amount is a list", callArgs("prod", "payments.send", `{"amount": [1]}`),
			`args.amount is a list (a list), the condition compares it with a number (100) using >`},
		{"no tier label", policy.Input{Run: contracts.Run{Agent: "crm-bot", Tenant: "t"}, Tool: "crm.delete"}, `labels has no field "tier"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Evaluate(tt.in)
			if d.Action != policy.ActionRequireApproval || !strings.Contains(d.Error, tt.want) {
				t.Errorf("Evaluate: %s, error %q; want require_approval with %q", d.Action, d.Error, tt.want)
			}
			_, steps := p.Explain(tt.in)
			if last := steps[len(steps)-1].Why; !strings.Contains(last, tt.want) {
				t.Errorf("Explain: %q lacks %q", last, tt.want)
			}
		})
	}
	// A condition on the fast path and one on the tracked path explain the
	// same way.
	heavy := mustParse(t, `
version: h1
rules:
  - name: many
    tools: ["t"]
    when: 'args.items.exists(i, i > 3)'
    action: allow
`)
	d := heavy.Evaluate(callArgs("", "t", `{"items": [1, "x"]}`))
	if !strings.Contains(d.Error, `i is a string ("x"), the condition compares it with a number (3) using >`) {
		t.Errorf("comprehension: error %q", d.Error)
	}
	index := mustParse(t, `
version: i1
rules:
  - name: by-index
    tools: ["t"]
    when: 'args["amount"] > 1'
    action: allow
`)
	if d := index.Evaluate(callArgs("", "t", `{}`)); !strings.Contains(d.Error, `args has no key "amount"`) {
		t.Errorf("index: error %q", d.Error)
	}
}

// conditionPolicy gates payments by amount and tenant with CEL.
const conditionPolicy = `
version: c1
groups:
  finance: [alice, bob]
  treasury: [bob, carol]
rules:
  - name: big-prod-payments
    tools: ["payments.*"]
    when: 'args.amount > 100 && run.tenant == "prod"'
    action: require_approval
    risk: high
    approvers: ["group:finance", "group:treasury", dave]
    quorum: 2
  - name: refunds-to-self
    tools: ["payments.refund"]
    when: >-
      args.recipient == run.requested_by
    action: deny
    reason: "Refunds to yourself are not allowed."
  - name: small-payments
    tools: ["payments.*"]
    action: allow
  - name: vip-labels
    tools: ["crm.*"]
    when: 'labels.tier == "vip" && tool.endsWith(".delete") && agent.startsWith("crm-") && tenant != ""'
    action: require_approval
  - name: nested
    tools: ["deploy"]
    when: 'args.targets.exists(t, t.env == "prod") || args.?force.orValue(false)'
    action: require_approval
    risk: critical
  - name: deploy-ok
    tools: ["deploy"]
    action: allow
`

func TestConditions(t *testing.T) {
	p := mustParse(t, conditionPolicy)
	tests := []struct {
		name   string
		in     policy.Input
		rule   string
		action string
		err    string // substring of Decision.Error; "" means none
	}{
		{"int over", callArgs("prod", "payments.send", `{"amount": 250}`), "big-prod-payments", policy.ActionRequireApproval, ""},
		{"double over", callArgs("prod", "payments.send", `{"amount": 250.5}`), "big-prod-payments", policy.ActionRequireApproval, ""},
		{"exponent over", callArgs("prod", "payments.send", `{"amount": 1e3}`), "big-prod-payments", policy.ActionRequireApproval, ""},
		{"int at the limit", callArgs("prod", "payments.send", `{"amount": 100}`), "small-payments", policy.ActionAllow, ""},
		{"double just over", callArgs("prod", "payments.send", `{"amount": 100.01}`), "big-prod-payments", policy.ActionRequireApproval, ""},
		{"double under", callArgs("prod", "payments.send", `{"amount": 99.99}`), "small-payments", policy.ActionAllow, ""},
		{"negative", callArgs("prod", "payments.send", `{"amount": -5000}`), "small-payments", policy.ActionAllow, ""},
		{"huge int", callArgs("prod", "payments.send", `{"amount": 123456789012345678901234567890}`), "big-prod-payments", policy.ActionRequireApproval, ""},
		{"other tenant", callArgs("staging", "payments.send", `{"amount": 250}`), "small-payments", policy.ActionAllow, ""},
		// Fail closed: an error gates with the erroring rule's settings.
		{"missing amount", callArgs("prod", "payments.send", `{"recipient": "x"}`), "big-prod-payments", policy.ActionRequireApproval, "no such key: amount"},
		{"no arguments", callArgs("prod", "payments.send", ``), "big-prod-payments", policy.ActionRequireApproval, "no such key: amount"},
		{"null arguments", callArgs("prod", "payments.send", `null`), "big-prod-payments", policy.ActionRequireApproval, "no such key: amount"},
		{"amount is a string", callArgs("prod", "payments.send", `{"amount": "250"}`), "big-prod-payments", policy.ActionRequireApproval, "no such overload"},
		{"arguments not an object", callArgs("prod", "payments.send", `[1, 2]`), "big-prod-payments", policy.ActionRequireApproval, "not a JSON object"},
		{"arguments not JSON", callArgs("prod", "payments.send", `{"amount": 250`), "big-prod-payments", policy.ActionRequireApproval, "not valid JSON"},
		// CEL's && and || are commutative: an error on one side is absorbed
		// when the other side alone decides (false && error is false).
		{"missing amount, other tenant", callArgs("staging", "payments.send", `{}`), "small-payments", policy.ActionAllow, ""},
		// A deny rule whose condition errors denies: as if the condition
		// held, the stricter way (never allows, never skipped).
		{"refund to self", policy.Input{Run: contracts.Run{Agent: "a", RequestedBy: "u1"}, Tool: "payments.refund", Arguments: json.RawMessage(`{"amount": 5, "recipient": "u1"}`)}, "refunds-to-self", policy.ActionDeny, ""},
		{"refund to other", policy.Input{Run: contracts.Run{Agent: "a", RequestedBy: "u1"}, Tool: "payments.refund", Arguments: json.RawMessage(`{"amount": 5, "recipient": "u2"}`)}, "small-payments", policy.ActionAllow, ""},
		{"refund without recipient", policy.Input{Run: contracts.Run{Agent: "a", RequestedBy: "u1"}, Tool: "payments.refund", Arguments: json.RawMessage(`{"amount": 5}`)}, "refunds-to-self", policy.ActionDeny, "no such key: recipient"},
		// tool, agent, tenant and labels variables.
		{"vip delete", policy.Input{Run: contracts.Run{Agent: "crm-bot", Tenant: "t", Labels: map[string]string{"tier": "vip"}}, Tool: "crm.delete"}, "vip-labels", policy.ActionRequireApproval, ""},
		{"vip read", policy.Input{Run: contracts.Run{Agent: "crm-bot", Tenant: "t", Labels: map[string]string{"tier": "vip"}}, Tool: "crm.read"}, "default", policy.ActionRequireApproval, ""},
		{"no tier label", policy.Input{Run: contracts.Run{Agent: "crm-bot", Tenant: "t"}, Tool: "crm.delete"}, "vip-labels", policy.ActionRequireApproval, "no such key: tier"},
		// Nested arguments, comprehensions and optionals.
		{"prod target", callArgs("", "deploy", `{"targets": [{"env": "dev"}, {"env": "prod"}]}`), "nested", policy.ActionRequireApproval, ""},
		{"dev targets", callArgs("", "deploy", `{"targets": [{"env": "dev"}]}`), "deploy-ok", policy.ActionAllow, ""},
		{"forced", callArgs("", "deploy", `{"targets": [], "force": true}`), "nested", policy.ActionRequireApproval, ""},
		{"targets missing", callArgs("", "deploy", `{"force": false}`), "nested", policy.ActionRequireApproval, "no such key: targets"},
		{"wrong type in list", callArgs("", "deploy", `{"targets": [1]}`), "nested", policy.ActionRequireApproval, "no such key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, how := range []string{"Evaluate", "Explain"} {
				var d policy.Decision
				if how == "Evaluate" {
					d = p.Evaluate(tt.in)
				} else {
					var steps []policy.Step
					d, steps = p.Explain(tt.in)
					last := steps[len(steps)-1]
					if tt.err != "" && !strings.Contains(last.Why, "condition error: ") {
						t.Errorf("Explain: last step %+v does not say condition error", last)
					}
				}
				if d.Rule != tt.rule || d.Action != tt.action {
					t.Errorf("%s: {%s %s}, want {%s %s} (error %q)", how, d.Rule, d.Action, tt.rule, tt.action, d.Error)
				}
				if tt.err == "" && d.Error != "" || !strings.Contains(d.Error, tt.err) {
					t.Errorf("%s: Error = %q, want %q", how, d.Error, tt.err)
				}
			}
		})
	}
}

func TestFailClosedSettings(t *testing.T) {
	p := mustParse(t, conditionPolicy)

	// A gated rule's condition errors: its own settings, and the error.
	d := p.Evaluate(callArgs("prod", "payments.send", `{}`))
	want := policy.Decision{
		Action: policy.ActionRequireApproval, Rule: "big-prod-payments", Version: "c1", Line: 7, Error: `args has no field "amount" (CEL: no such key: amount)`,
		Risk: contracts.RiskHigh, Approvers: []string{"alice", "bob", "carol", "dave"}, Quorum: 2, Veto: true,
		Order: contracts.OrderAny, Timeout: policy.DefaultTimeout, OnTimeout: contracts.OnTimeoutReject,
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
	}
	assertDecision(t, d, want)

	// A deny rule's condition errors: it denies (the stricter way), and
	// the reason says what could not be checked.
	d = p.Evaluate(policy.Input{Run: contracts.Run{Agent: "a"}, Tool: "payments.refund", Arguments: json.RawMessage(`{}`)})
	want = policy.Decision{
		Action: policy.ActionDeny, Rule: "refunds-to-self", Version: "c1", Line: 14, Error: `args has no field "recipient" (CEL: no such key: recipient)`,
		Reason: `Refunds to yourself are not allowed. (The policy could not check this call: args has no field "recipient" (CEL: no such key: recipient).)`,
		Risk:   contracts.RiskMedium, Quorum: 1, Veto: true, Order: contracts.OrderAny, Timeout: policy.DefaultTimeout,
		OnTimeout: contracts.OnTimeoutReject, AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
	}
	assertDecision(t, d, want)

	// An allow rule's condition errors, with risk_defaults and default_rule
	// in play: risk_defaults.high fills what default_rule leaves.
	p = mustParse(t, `
default_rule: {approvers: [ops1, ops2], channels: [email], risk: critical}
risk_defaults:
  critical: {quorum: 2, timeout: 1h}
  high: {quorum: 1, timeout: 3h}
rules:
  - name: cheap-reads
    tools: ["read.*"]
    when: args.size < 10
    action: allow
`)
	d = p.Evaluate(callArgs("", "read.file", `{"size": "big"}`))
	if d.Action != policy.ActionRequireApproval || d.Error == "" || d.Risk != contracts.RiskCritical ||
		d.Quorum != 2 || d.Timeout != time.Hour || !slices.Equal(d.Approvers, []string{"ops1", "ops2"}) ||
		!slices.Equal(d.Channels, []string{"email"}) {
		t.Errorf("allow rule erroring: %+v", d)
	}
}

func TestCostLimit(t *testing.T) {
	p := mustParse(t, `
rules:
  - name: quadratic
    tools: [t]
    when: 'args.items.all(x, args.items.all(y, x == y || x != y)) && false'
    action: allow
  - name: regex
    tools: [r]
    when: 'args.text.matches("^(a|b)*c$")'
    action: allow
`)
	small := `{"items": [1, 2, 3]}`
	if d := p.Evaluate(callArgs("", "t", small)); d.Rule != "default" || d.Error != "" {
		t.Errorf("small input: %+v", d)
	}
	items := make([]int, 500)
	big, _ := json.Marshal(map[string]any{"items": items})
	d := p.Evaluate(callArgs("", "t", string(big)))
	if d.Action != policy.ActionRequireApproval || d.Rule != "quadratic" || !strings.Contains(d.Error, "cost limit") {
		t.Errorf("over the cost limit: %+v", d)
	}
	// The same with a context that can interrupt.
	d = p.EvaluateContext(t.Context(), callArgs("", "t", string(big)))
	if d.Rule != "quadratic" || !strings.Contains(d.Error, "cost limit") {
		t.Errorf("EvaluateContext over the cost limit: %+v", d)
	}
	if d := p.Evaluate(callArgs("", "r", `{"text": "ababc"}`)); d.Rule != "regex" || d.Error != "" {
		t.Errorf("regex on a small string: %+v", d)
	}
	long, _ := json.Marshal(map[string]string{"text": strings.Repeat("ab", 50000) + "c"})
	if d := p.Evaluate(callArgs("", "r", string(long))); d.Rule != "regex" || !strings.Contains(d.Error, "cost limit") {
		t.Errorf("regex on a long string: %+v", d)
	}
}

func TestEvaluateContextCancelled(t *testing.T) {
	p := mustParse(t, `
rules:
  - name: loop
    tools: [t]
    when: 'args.items.exists(x, x == -1)'
    action: allow
`)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	items, _ := json.Marshal(map[string]any{"items": make([]int, 5000)})
	d := p.EvaluateContext(ctx, callArgs("", "t", string(items)))
	if d.Action != policy.ActionRequireApproval || d.Error == "" {
		t.Errorf("cancelled: %+v", d)
	}
}

func TestRiskDefaultsPrecedence(t *testing.T) {
	p := mustParse(t, `
default_rule:
  risk: low
  timeout: 8h
  channels: [inbox]
  approvers: [ops]
  allowed_decisions: [approve, reject, respond]
risk_defaults:
  critical:
    quorum: 2
    timeout: 2h
    veto: false
    allow_self_approval: true
    order: sequence
    approvers: [cfo, ceo, "group:board"]
    channels: [slack, email]
    on_timeout: reject
    allowed_decisions: [approve, reject]
  high:
    timeout: 4h
groups:
  board: [bea, ben]
rules:
  - name: critical-own-timeout
    tools: [a]
    action: require_approval
    risk: critical
    timeout: 30m
    channels: ["webhook:pager"]
  - name: critical-inherits
    tools: [b]
    action: require_approval
    risk: critical
  - name: high-partial
    tools: [c]
    action: require_approval
    risk: high
  - name: no-risk
    tools: [d]
    action: require_approval
`)
	tests := []struct {
		tool string
		want policy.Decision
	}{
		{"a", policy.Decision{Risk: "critical", Timeout: 30 * time.Minute, Quorum: 2, Veto: false, AllowSelfApproval: true,
			Order: "sequence", Approvers: []string{"cfo", "ceo", "bea", "ben"}, Channels: []string{"webhook:pager"}, OnTimeout: "reject",
			AllowedDecisions: []string{"approve", "reject"}}},
		{"b", policy.Decision{Risk: "critical", Timeout: 2 * time.Hour, Quorum: 2, Veto: false, AllowSelfApproval: true,
			Order: "sequence", Approvers: []string{"cfo", "ceo", "bea", "ben"}, Channels: []string{"slack", "email"}, OnTimeout: "reject",
			AllowedDecisions: []string{"approve", "reject"}}},
		// risk_defaults.high sets the timeout only; the rest from default_rule.
		{"c", policy.Decision{Risk: "high", Timeout: 4 * time.Hour, Quorum: 1, Veto: true, Order: "any",
			Approvers: []string{"ops"}, Channels: []string{"inbox"}, OnTimeout: "reject",
			AllowedDecisions: []string{"approve", "reject", "respond"}}},
		// No risk: default_rule's (low), which has no tier defaults.
		{"d", policy.Decision{Risk: "low", Timeout: 8 * time.Hour, Quorum: 1, Veto: true, Order: "any",
			Approvers: []string{"ops"}, Channels: []string{"inbox"}, OnTimeout: "reject",
			AllowedDecisions: []string{"approve", "reject", "respond"}}},
		// The default: default_rule.
		{"zzz", policy.Decision{Risk: "low", Timeout: 8 * time.Hour, Quorum: 1, Veto: true, Order: "any",
			Approvers: []string{"ops"}, Channels: []string{"inbox"}, OnTimeout: "reject",
			AllowedDecisions: []string{"approve", "reject", "respond"}}},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			d := p.Evaluate(call("x", tt.tool))
			tt.want.Action, tt.want.Rule, tt.want.Version, tt.want.Line = d.Action, d.Rule, d.Version, d.Line
			assertDecision(t, d, tt.want)
		})
	}
}

func TestGroups(t *testing.T) {
	p := mustParse(t, `
groups:
  finance: [alice, bob]
  ops: [bob, carol]
rules:
  - name: r
    tools: [t]
    action: require_approval
    approvers: [zed, "group:finance", alice, "group:ops"]
    quorum: 4
`)
	d := p.Evaluate(call("a", "t"))
	if !slices.Equal(d.Approvers, []string{"zed", "alice", "bob", "carol"}) || d.Quorum != 4 {
		t.Errorf("approvers %v quorum %d, want the groups resolved in order without repeats", d.Approvers, d.Quorum)
	}
	// Quorum is checked against the resolved, distinct approvers.
	_, err := policy.Parse([]byte(`
groups:
  finance: [alice, bob]
rules:
  - name: r
    tools: [t]
    action: require_approval
    approvers: [alice, "group:finance"]
    quorum: 3
`))
	wantProblem(t, err, 9, "quorum 3 cannot be met by 2 distinct approvers (alice, bob)")
	// An unknown group is a warning (Lint), not an error: it stays as
	// written, so nobody can approve as it, and quorum is not checked.
	p = mustParse(t, "rules:\n  - name: r\n    tools: [t]\n    action: require_approval\n    approvers: [\"group:ghosts\"]\n    quorum: 3\n")
	if d := p.Evaluate(call("a", "t")); !slices.Equal(d.Approvers, []string{"group:ghosts"}) {
		t.Errorf("unknown group: %v", d.Approvers)
	}
}

// wantProblem checks that err is an *Errors with a problem on line that
// mentions every substring.
func wantProblem(t *testing.T, err error, line int, subs ...string) {
	t.Helper()
	var errs *policy.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v is not *policy.Errors", err)
	}
	for _, p := range errs.Problems {
		if line != 0 && p.Line != line {
			continue
		}
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(p.Message, s)
		}
		if ok {
			if p.Severity != policy.SeverityError {
				t.Errorf("problem %v has severity %q", p, p.Severity)
			}
			return
		}
	}
	t.Errorf("no problem on line %d mentioning %q in:\n%v", line, subs, err)
}

func TestParseErrors(t *testing.T) {
	rule := func(extra string) string {
		return "rules:\n  - name: r\n    tools: [\"a.*\"]\n    action: require_approval\n" + extra
	}
	tests := []struct {
		name string
		src  string
		line int      // 0: any line
		want []string // every substring must appear in one problem's message
	}{
		{"empty file", "", 0, []string{"empty"}},
		{"only comments", "# nothing here\n", 0, []string{"empty"}},
		{"null document", "~\n", 0, []string{"empty"}},
		{"bare separator", "---\n", 0, []string{"empty"}},
		{"not a mapping", "- a\n- b\n", 1, []string{"must be a mapping"}},
		{"syntax", "rules: [\n", 0, []string{"YAML syntax"}},
		{"syntax with line", "rules:\n  - name: a\n   tools: [x]\n", 0, []string{"YAML syntax"}},
		{"second document", "default: allow\n---\ndefault: deny\n", 2, []string{"second YAML document"}},
		{"unknown top-level field", "defualt: allow\n", 1, []string{`unknown field "defualt"`, `did you mean "default"?`}},
		{"unknown rule field", rule("    actoin: allow\n"), 5, []string{`unknown field "actoin" in rule "r"`, `"action"`}},
		{"unknown default_rule field", "default_rule:\n  riks: high\n", 2, []string{`unknown field "riks" in default_rule`}},
		{"unknown default action", "default: permit\n", 1, []string{"default", `"permit"`}},
		{"unknown rule action", "rules:\n  - name: r\n    tools: [a]\n    action: approve\n", 4, []string{`rule "r": unknown action "approve"`}},
		{"missing action", "rules:\n  - name: r\n    tools: [a]\n", 2, []string{`rule "r": action is required`}},
		{"missing name", "rules:\n  - tools: [a]\n    action: allow\n", 2, []string{"rules[0]: name is required"}},
		{"matches nothing", "rules:\n  - name: r\n    action: allow\n", 2, []string{`rule "r" matches nothing in particular`, `tools: ["*"]`}},
		{"empty tools", "rules:\n  - name: r\n    tools: []\n    action: allow\n", 3, []string{"empty list"}},
		{"empty tool glob", "rules:\n  - name: r\n    tools: [\"\"]\n    action: allow\n", 3, []string{"tools[0] is empty"}},
		{"bracket glob", "rules:\n  - name: r\n    tools: [ok, \"db.[a-z]*\"]\n    action: deny\n", 3, []string{"tools[1]", `"db.[a-z]*"`, "wildcards"}},
		{"brace glob", "rules:\n  - name: r\n    tools: [\"{a,b}\"]\n    action: deny\n", 3, []string{"tools[0]", "wildcards"}},
		{"spaced glob", "rules:\n  - name: r\n    tools: [\" shell.*\"]\n    action: deny\n", 3, []string{"tools[0]", "space"}},
		{"bad agent glob", "rules:\n  - name: r\n    tools: [a]\n    agents: [\"bot\\\\1\"]\n    action: allow\n", 4, []string{"agents[0]", "wildcards"}},
		{"bad tenant glob", "rules:\n  - name: r\n    tenants: [\"t]\"]\n    action: allow\n", 3, []string{"tenants[0]", "wildcards"}},
		{"tools not a list", "rules:\n  - name: r\n    tools: a\n    action: allow\n", 3, []string{"tools must be a list"}},
		{"labels not a map", "rules:\n  - name: r\n    labels: [a]\n    action: allow\n", 3, []string{"labels must be a mapping"}},
		{"label value a list", "rules:\n  - name: r\n    labels: {env: [a]}\n    action: allow\n", 3, []string{"labels.env must be a string"}},
		{"bad duration", rule("    timeout: 90\n"), 5, []string{`invalid duration "90"`}},
		{"bad duration word", rule("    timeout: soon\n"), 5, []string{`invalid duration "soon"`}},
		{"duration not a scalar", rule("    timeout: [1h]\n"), 5, []string{"timeout must be a duration"}},
		{"negative timeout", rule("    timeout: -1h\n"), 5, []string{"-1h must be positive"}},
		{"unknown risk", rule("    risk: extreme\n"), 5, []string{`unknown risk "extreme"`}},
		{"unknown on_timeout", rule("    on_timeout: escalate\n"), 5, []string{"on_timeout", `"escalate"`}},
		{"unknown order", rule("    order: random\n"), 5, []string{`order "random"`}},
		{"unknown decision", rule("    allowed_decisions: [approve, maybe]\n"), 5, []string{`unknown decision "maybe"`}},
		{"unknown channel", rule("    channels: [slack, \"sms:+15551234\"]\n"), 5, []string{`channel "sms:+15551234": unknown channel "sms"`}},
		{"bad Slack channel", rule("    channels: [\"slack:#Payments\"]\n"), 5, []string{`Slack channel names are lower case`}},
		{"empty group", rule("    channels: [\"email:group:\"]\n"), 5, []string{`group name ""`}},
		{"quorum too big", rule("    approvers: [a]\n    quorum: 2\n"), 6, []string{"quorum 2 cannot be met by 1"}},
		{"quorum of duplicates", rule("    approvers: [a, a]\n    quorum: 2\n"), 5, []string{`"a" is listed twice`}},
		{"zero quorum", rule("    quorum: 0\n"), 5, []string{"quorum 0 must be at least 1"}},
		{"quorum not a number", rule("    quorum: two\n"), 5, []string{"quorum must be a whole number"}},
		{"veto not a bool", rule("    veto: sometimes\n"), 5, []string{"veto must be true or false"}},
		{"empty approver", rule("    approvers: [\"\"]\n"), 5, []string{"approvers[0] is empty"}},
		{"empty group reference", rule("    approvers: [\"group:\"]\n"), 5, []string{"group name missing"}},
		{"duplicate name", "rules:\n  - name: r\n    tools: [a]\n    action: allow\n  - name: r\n    tools: [b]\n    action: deny\n",
			5, []string{`duplicate rule name "r" (first on line 2)`}},
		{"duplicate key", "rules:\n  - name: r\n    tools: [a]\n    tools: [b]\n    action: deny\n", 4, []string{`"tools" is set twice`}},
		{"duplicate key in JSON", `{"rules": [{"name": "r", "tools": ["a"], "action": "deny", "\u0061ction": "allow"}]}`, 1, []string{`rules[0]: "action" is set twice`}},
		{"duplicate top-level key in JSON", `{"default": "deny", "rules": [], "default": "allow"}`, 1, []string{`"default" is set twice`}},
		{"reserved name", "rules:\n  - name: default\n    tools: [a]\n    action: allow\n", 2, []string{`"default" is reserved`}},
		{"default_rule action", "default_rule:\n  action: allow\n", 2, []string{"default_rule", "action cannot be set"}},
		{"default_rule tools", "default_rule:\n  tools: [a]\n", 2, []string{"default_rule", "tools cannot be set"}},
		{"default_rule when", "default_rule:\n  when: 'true'\n", 2, []string{"default_rule", "when cannot be set"}},
		{"default_rule name", "default_rule:\n  name: fallback\n", 2, []string{"default_rule", "name cannot be set"}},
		{"default_rule risk", "default_rule:\n  risk: huge\n", 2, []string{"default_rule", `unknown risk "huge"`}},
		{"default_rule quorum", "default_rule:\n  approvers: [a]\n  quorum: 2\n", 3, []string{"default_rule", "quorum 2 cannot be met"}},
		{"risk_defaults unknown tier", "risk_defaults:\n  severe: {quorum: 2}\n", 2, []string{`unknown risk "severe"`}},
		{"risk_defaults field", "risk_defaults:\n  high: {summary: x}\n", 2, []string{`unknown field "summary" in risk_defaults.high`}},
		{"risk_defaults quorum", "risk_defaults:\n  high: {quorum: 3, approvers: [a, b]}\n", 2, []string{"risk_defaults.high: quorum 3 cannot be met by 2"}},
		{"quorum from risk_defaults", "risk_defaults:\n  high: {quorum: 3}\nrules:\n  - name: r\n    tools: [a]\n    action: require_approval\n    risk: high\n    approvers: [a, b]\n",
			4, []string{`rule "r": quorum 3 (from risk_defaults.high) cannot be met by 2`}},
		{"group of groups", "groups:\n  a: [\"group:b\"]\n  b: [x]\n", 2, []string{"a group lists users, not other groups"}},
		{"empty group", "groups:\n  a: []\n", 2, []string{"groups.a has no members"}},
		{"wrong type", "rules:\n  - name: r\n    tools: a\n    action: allow\n", 3, []string{"must be a list"}},
		{"rules not a list", "rules: {a: b}\n", 1, []string{"rules must be a list"}},
		{"rule not a mapping", "rules:\n  - just-a-string\n", 2, []string{"rules[0] must be a mapping"}},
		// CEL: syntax, unknown variables, type errors, non-bool results;
		// the position is the condition's in the file.
		{"cel syntax", rule("    when: 'args.amount >'\n"), 5, []string{`rule "r": when: Syntax error`}},
		{"cel unknown variable", rule("    when: 'amount > 100'\n"), 5, []string{"undeclared reference to 'amount'"}},
		{"cel type error", rule("    when: 'tool > 3'\n"), 5, []string{"no matching overload for '_>_'"}},
		{"cel not bool", rule("    when: 'args.amount + 1'\n"), 5, []string{"must be a bool"}},
		{"cel string result", rule("    when: tool\n"), 5, []string{"must be a bool, but it is string"}},
		{"cel block scalar", rule("    when: |\n      args.a > 1 &&\n      nope\n"), 7, []string{"undeclared reference to 'nope'"}},
		{"cel empty", rule("    when: ''\n"), 5, []string{"when is empty"}},
		{"cel not a string", rule("    when: [a]\n"), 5, []string{"when must be a string"}},
		{"cel labels value type", rule("    when: 'labels.env > 3'\n"), 5, []string{"no matching overload"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want an error", p)
			}
			if p != nil {
				t.Fatal("Parse returned a policy and an error")
			}
			wantProblem(t, err, tt.line, tt.want...)
			// Lint reports the same error.
			found := false
			for _, pr := range policy.Lint([]byte(tt.src)) {
				found = found || pr.Severity == policy.SeverityError && (tt.line == 0 || pr.Line == tt.line)
			}
			if !found {
				t.Errorf("Lint does not report the error on line %d", tt.line)
			}
		})
	}
}

// TestConditionPositions checks that CEL errors point at the column of the
// fault within the file.
func TestConditionPositions(t *testing.T) {
	tests := []struct {
		name      string
		when      string
		line, col int
	}{
		{"single-quoted", "    when: 'args.a > 1 && nope'\n", 5, 26},
		{"double-quoted", "    when: \"args.a > 1 && nope\"\n", 5, 26},
		{"plain", "    when: args.a > 1 && nope\n", 5, 25},
		{"literal block", "    when: |\n      args.a > 1 &&\n        nope\n", 7, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "rules:\n  - name: r\n    tools: [a]\n    action: allow\n" + tt.when
			_, err := policy.Parse([]byte(src))
			var errs *policy.Errors
			if !errors.As(err, &errs) || len(errs.Problems) != 1 {
				t.Fatalf("want one problem, got %v", err)
			}
			if p := errs.Problems[0]; p.Line != tt.line || p.Column != tt.col {
				t.Errorf("problem at %d:%d, want %d:%d: %v", p.Line, p.Column, tt.line, tt.col, p)
			}
		})
	}
}

// TestParseReportsEveryProblem checks that validation does not stop at the
// first bad rule: one run of `policy lint` shows them all, in file order.
func TestParseReportsEveryProblem(t *testing.T) {
	_, err := policy.Parse([]byte("default: maybe\nrules:\n  - name: a\n    tools: [a]\n    action: nope\n  - name: b\n    tools: [b]\n    when: 'x'\n    action: allow\n"))
	var errs *policy.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want *Errors, got %v", err)
	}
	var got []string
	for _, p := range errs.Problems {
		got = append(got, p.String())
	}
	want := []string{
		`1:10: default: unknown action "maybe" (allow, deny, require_approval)`,
		`5:13: rule "a": unknown action "nope" (allow, deny, require_approval)`,
		`8:12: rule "b": when: undeclared reference to 'x'`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems\n got  %q\n want %q", got, want)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "policy: 1:10: default") || strings.Count(msg, "\n") != 2 {
		t.Errorf("Error() = %q", msg)
	}
}

func TestParseAcceptsTrailingSeparator(t *testing.T) {
	p := mustParse(t, "default: allow\n---\n")
	if d := p.Evaluate(call("a", "b")); d.Action != policy.ActionAllow {
		t.Fatalf("got %+v", d)
	}
}

func TestParseMergeKeysAndAnchors(t *testing.T) {
	p := mustParse(t, `
rules:
  - &gate
    name: a
    tools: [a]
    action: require_approval
    risk: high
    timeout: 1h
  - <<: *gate
    name: b
    tools: [b]
    risk: low
`)
	if d := p.Evaluate(call("x", "a")); d.Rule != "a" || d.Risk != "high" || d.Timeout != time.Hour {
		t.Errorf("a: %+v", d)
	}
	if d := p.Evaluate(call("x", "b")); d.Rule != "b" || d.Risk != "low" || d.Timeout != time.Hour || d.Action != policy.ActionRequireApproval {
		t.Errorf("b (merged from a): %+v", d)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("default: permit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := policy.Load(bad)
	var errs *policy.Errors
	if !errors.As(err, &errs) || errs.File != bad {
		t.Fatalf("Load(bad) = %v, want *Errors naming the file", err)
	}
	if want := bad + `:1:10: default: unknown action "permit" (allow, deny, require_approval)`; err.Error() != want {
		t.Errorf("Load(bad) = %q, want %q", err, want)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := policy.Load(missing); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing) = %v, want an error naming the file", err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("default: deny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := policy.Load(good); err != nil || p.DefaultAction() != policy.ActionDeny {
		t.Errorf("Load(good) = %v, %v", p, err)
	}
}

func TestLoadDeployPolicy(t *testing.T) {
	p, err := policy.Load("../../deploy/policy.yaml")
	if err != nil {
		t.Fatalf("deploy/policy.yaml: %v", err)
	}
	if p.DefaultAction() != policy.ActionRequireApproval {
		t.Errorf("shipped default = %q, want require_approval", p.DefaultAction())
	}
	tests := []struct {
		tool, action, rule string
	}{
		{"search_web", policy.ActionAllow, "read-only-tools"},
		{"get_invoice", policy.ActionAllow, "read-only-tools"},
		{"shell.run", policy.ActionDeny, "no-shell"},
		{"exec_command", policy.ActionDeny, "no-shell"},
		{"payments.send", policy.ActionRequireApproval, "payments"},
		{"db.drop_table", policy.ActionRequireApproval, "production-database"},
		{"email.send", policy.ActionRequireApproval, "outbound-email"},
		{"brand_new_tool", policy.ActionRequireApproval, "default"},
	}
	for _, tt := range tests {
		d := p.Evaluate(call("any-agent", tt.tool))
		if d.Action != tt.action || d.Rule != tt.rule {
			t.Errorf("%s: got {%s %s}, want {%s %s}", tt.tool, d.Action, d.Rule, tt.action, tt.rule)
		}
	}
	if d := p.Evaluate(call("a", "db.drop_table")); d.Risk != contracts.RiskCritical || d.Timeout != 2*time.Hour {
		t.Errorf("production-database settings: %+v", d)
	}
	if d := p.Evaluate(call("a", "shell.run")); d.Reason == "" || !strings.Contains(d.Reason, "shell") {
		t.Errorf("no-shell reason = %q", d.Reason)
	}
	for _, pr := range policy.Lint(p.Source()) {
		if pr.Severity == policy.SeverityError {
			t.Errorf("lint: %v", pr)
		}
	}
}

func TestExplain(t *testing.T) {
	p := mustParse(t, `
rules:
  - name: billing-only
    tools: ["payments.*"]
    agents: ["billing-*"]
    action: allow
  - name: prod
    tools: ["payments.*", "refunds.*"]
    tenants: [prod]
    labels: {env: prod}
    when: 'args.amount > 100'
    action: require_approval
  - name: rest
    tools: ["*"]
    action: deny
`)
	in := policy.Input{Run: contracts.Run{Agent: "support-1", Tenant: "prod", Labels: map[string]string{"env": "prod"}},
		Tool: "payments.send", Arguments: json.RawMessage(`{"amount": 50}`)}
	d, steps := p.Explain(in)
	want := []policy.Step{
		{Rule: "billing-only", Line: 3, Why: "tool payments.send matches payments.*; agent support-1 does not match billing-*"},
		{Rule: "prod", Line: 7, Why: "tool payments.send matches payments.*; tenant prod matches prod; label env=prod; condition args.amount > 100 is false"},
		{Rule: "rest", Line: 13, Matched: true, Why: "tool payments.send matches *"},
	}
	if d.Rule != "rest" || !slices.Equal(steps, want) {
		t.Errorf("Explain = %s\n%+v\nwant\n%+v", d.Rule, steps, want)
	}

	in.Run.Labels = map[string]string{"env": "dev"}
	in.Tool = "refunds.x"
	_, steps = p.Explain(in)
	if got := steps[1].Why; got != "tool refunds.x matches refunds.*; tenant prod matches prod; label env is dev, not prod" {
		t.Errorf("label mismatch: %q", got)
	}
	in.Run.Labels = nil
	in.Run.Tenant = ""
	_, steps = p.Explain(in)
	if got := steps[0].Why; got != `tool refunds.x does not match payments.*` {
		t.Errorf("tool mismatch: %q", got)
	}
	if got := steps[1].Why; got != `tool refunds.x matches refunds.*; tenant "" does not match prod` {
		t.Errorf("tenant mismatch: %q", got)
	}

	p = mustParse(t, "rules:\n  - name: two\n    tools: [a, b]\n    action: allow\n")
	_, steps = p.Explain(call("x", "c"))
	if want := []policy.Step{
		{Rule: "two", Line: 2, Why: "tool c matches none of a, b"},
		{Rule: "default", Matched: true, Why: "no rule matched; the default is require_approval"},
	}; !slices.Equal(steps, want) {
		t.Errorf("steps %+v", steps)
	}
}

// TestConcurrentEvaluate runs decisions in parallel (for -race): the tool
// index is filled concurrently.
func TestConcurrentEvaluate(t *testing.T) {
	p := mustParse(t, conditionPolicy)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				tool := []string{"payments.send", "payments.refund", "crm.delete", "deploy", "other"}[(g+i)%5]
				d := p.Evaluate(callArgs("prod", tool, `{"amount": 250, "recipient": "x", "targets": []}`))
				if d.Rule == "" {
					t.Error("no rule")
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		glob, name string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything.at/all", true},
		{"", "", true},
		{"", "a", false},
		{"db.*", "db.query", true},
		{"db.*", "db.", true},
		{"db.*", "db", false},
		{"db.*", "xdb.query", false},
		{"*.send", "email.send", true},
		{"*.send", "email.send.later", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "a.x.b.y.c", true},
		{"a*b*c", "a.x.c.y.b", false},
		{"a*a*a", "aaaa", true},
		{"a*a*a", "aa", false},
		{"a*a*b", "aaaaaaaaaaaaaaaaaaac", false},
		{"ab*ba", "aba", false}, // prefix and suffix would overlap
		{"?", "a", true},
		{"?", "", false},
		{"??", "a", false},
		{"?", "é", true},    // one rune of two bytes
		{"??", "é", false},  // ... is one character
		{"*??", "é", false}, // ... also after a star
		{"?b", "éb", true},
		{"*é", "xé", true},
		{"*x", "*yx", true}, // a '*' in the name is a plain character
		{"*", "*", true},
		{"a?", "a?", true},
		{"*.admin_*", "svc.eu.admin_x", true}, // skips to each '.' in turn
		{"*.admin_*", "svc.eu.adminx", false},
		{"*.x", "a.b.c", false},
		{"*.x", "a.b.x", true},
		{"*é?", "aéé", true},
		{"exact", "exact", true},
		{"exact", "exact2", false},
		{"Exact", "exact", false},
	}
	for _, tt := range tests {
		if got := policy.Match(tt.glob, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.glob, tt.name, got, tt.want)
		}
		// The compiled form used by rules agrees.
		p, err := policy.Parse([]byte("rules:\n  - name: r\n    tools: [" + strconv.Quote(tt.glob) + "]\n    action: allow\n"))
		if err != nil {
			continue // "" is not a valid rule glob
		}
		if got := p.Evaluate(call("a", tt.name)).Rule == "r"; got != tt.want {
			t.Errorf("rule glob %q on %q: matched %v, want %v", tt.glob, tt.name, got, tt.want)
		}
	}
}

// TestConditionVariables checks that each variable reaches a condition,
// also when it is only tested for presence or used whole.
func TestConditionVariables(t *testing.T) {
	in := policy.Input{
		Run: contracts.Run{ID: "r1", ThreadID: "t1", Agent: "bot", RequestedBy: "u1", Owner: "u2", Tenant: "acme",
			Labels: map[string]string{"env": "prod"}},
		Tool: "x.y", Arguments: json.RawMessage(`{"n": 3, "list": [1, 2], "obj": {"k": "v"}}`),
	}
	for _, when := range []string{
		`has(args.n)`,
		`!has(args.missing)`,
		`size(args) == 3`,
		`"obj" in args`,
		`args.obj.k == "v" && args.list[1] == 2 && args.n == 3.0`,
		`args.n > 2.5 && args.n < 4 && args.n != 4u`,
		`run.id == "r1" && run.thread_id == "t1" && run.agent == "bot" && run.requested_by == "u1"`,
		`run.owner == "u2" && run.tenant == "acme" && run.labels.env == "prod"`,
		`size(run) == 7 && "tenant" in run && run == run`,
		`has(run.labels)`,
		`tool == "x.y" && agent == "bot" && tenant == "acme" && labels.env == "prod" && "env" in labels`,
		`tool.startsWith("x.") && agent.lowerAscii() == "bot" && tool.split(".").size() == 2`,
	} {
		t.Run(when, func(t *testing.T) {
			p := mustParse(t, "rules:\n  - name: r\n    tools: [\"*\"]\n    when: "+strconv.Quote(when)+"\n    action: deny\n")
			if d := p.Evaluate(in); d.Rule != "r" || d.Action != policy.ActionDeny || d.Error != "" {
				t.Errorf("Evaluate: %+v", d)
			}
		})
	}
}
