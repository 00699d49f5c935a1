package policy_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

func TestParseCases(t *testing.T) {
	cases, err := policy.ParseCases([]byte(`
# a comment
- name: big payment
  agent: billing-bot
  tenant: prod
  labels: {env: prod}
  run: {id: r1, thread_id: t1, requested_by: alice, owner: bob}
  tool: payments.send
  args:
    amount: 250
    rate: 1.5
    big: 18446744073709551615
    ok: true
    none: null
    when: 2026-11-23
    nested: {list: [1, "two", {three: 3}]}
  expect: {action: require_approval, rule: big, risk: high, error: ""}
- tool: search
  run: {agent: x, tenant: t, labels: {a: b}}
  expect:
    action: allow
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 2 {
		t.Fatalf("%d cases", len(cases))
	}
	c := cases[0]
	wantRun := contracts.Run{ID: "r1", ThreadID: "t1", Agent: "billing-bot", RequestedBy: "alice", Owner: "bob", Tenant: "prod",
		Labels: map[string]string{"env": "prod"}}
	if c.Name != "big payment" || c.Line != 3 || !reflect.DeepEqual(c.Run, wantRun) ||
		c.Tool != "payments.send" || c.Expect != (policy.Expect{Action: "require_approval", Rule: "big", Risk: "high"}) {
		t.Errorf("case 0: %+v", c)
	}
	if !json.Valid(c.Arguments) {
		t.Fatalf("arguments %s", c.Arguments)
	}
	if want := `{"amount":250,"big":18446744073709551615,"nested":{"list":[1,"two",{"three":3}]},"none":null,"ok":true,"rate":1.5,"when":"2026-11-23"}`; string(c.Arguments) != want {
		t.Errorf("arguments\n got  %s\n want %s", c.Arguments, want)
	}
	c = cases[1]
	if c.Name != "search (line 18)" || c.Run.Agent != "x" || c.Run.Tenant != "t" || c.Run.Labels["a"] != "b" || string(c.Arguments) != "{}" {
		t.Errorf("case 1: %+v", c)
	}
}

func TestParseCasesErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int
		want string
	}{
		{"empty", "", 0, "empty"},
		{"not a list", "tool: a\n", 1, "must be a list"},
		{"empty list", "[]\n", 1, "list of cases is empty"},
		{"item not a mapping", "- a\n", 1, "must be a mapping"},
		{"unknown field", "- tool: a\n  expect: {action: allow}\n  agnet: x\n", 3, `unknown field "agnet" in cases[0]; did you mean "agent"?`},
		{"unknown run field", "- tool: a\n  expect: {action: allow}\n  run: {tennant: x}\n", 3, `unknown field "tennant" in cases[0]: run; did you mean "tenant"?`},
		{"unknown expect field", "- tool: a\n  expect: {acton: allow}\n", 2, `unknown field "acton"`},
		{"missing tool", "- name: x\n  expect: {action: allow}\n", 1, `case "x": tool is required`},
		{"missing expect", "- tool: a\n", 1, "expect must name at least one of"},
		{"empty expect", "- tool: a\n  expect: {}\n", 1, "expect must name at least one of"},
		{"bad action", "- tool: a\n  expect: {action: approve}\n", 2, `unknown action "approve"`},
		{"bad risk", "- tool: a\n  expect: {risk: extreme}\n", 2, `unknown risk "extreme"`},
		{"agent twice", "- tool: a\n  agent: x\n  run: {agent: y}\n  expect: {action: allow}\n", 3, "also given as agent on line 2"},
		{"labels twice", "- tool: a\n  run: {labels: {a: b}}\n  labels: {c: d}\n  expect: {action: allow}\n", 2, "also given as labels on line 3"},
		{"args not a mapping", "- tool: a\n  args: [1]\n  expect: {action: allow}\n", 2, "args must be a mapping"},
		{"args not JSON", "- tool: a\n  args: {x: .inf}\n  expect: {action: allow}\n", 2, "is not a JSON number"},
		{"args key twice", "- tool: a\n  args: {x: 1, x: 2}\n  expect: {action: allow}\n", 2, `"x" is set twice`},
		{"syntax", "- tool: [\n", 0, "YAML syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cases, err := policy.ParseCases([]byte(tt.src))
			if err == nil {
				t.Fatalf("ParseCases = %+v, want an error", cases)
			}
			wantProblem(t, err, tt.line, tt.want)
		})
	}
}

func TestRunCases(t *testing.T) {
	p := mustParse(t, conditionPolicy)
	cases, err := policy.ParseCases([]byte(`
- name: passes
  tenant: prod
  tool: payments.send
  args: {amount: 250}
  expect: {action: require_approval, rule: big-prod-payments, risk: high}
- name: wrong action and rule
  tenant: prod
  tool: payments.send
  args: {amount: 5}
  expect: {action: deny, rule: big-prod-payments}
- name: rule that does not exist
  tool: deploy
  args: {targets: []}
  expect: {rule: deploy-okay}
- name: risk of a call that is not gated
  tool: deploy
  args: {targets: []}
  expect: {risk: low}
- name: expected error
  tenant: prod
  tool: payments.send
  expect: {error: "no such key: amount"}
- name: expected error missing
  tenant: prod
  tool: payments.send
  args: {amount: 1}
  expect: {error: "no such key"}
`))
	if err != nil {
		t.Fatal(err)
	}
	results := policy.RunCases(p, cases)
	wantDiff := []string{
		"",
		"action: got allow, want deny\nrule: got small-payments, want big-prod-payments",
		`rule: got deploy-ok, want deploy-okay (the policy has no rule "deploy-okay")`,
		"risk: got none (the call is not gated: allow), want low",
		"",
		`error: got "", want one containing "no such key"`,
	}
	for i, r := range results {
		if r.Diff != wantDiff[i] || r.Pass != (wantDiff[i] == "") {
			t.Errorf("case %q: pass %v diff %q, want %q", r.Case.Name, r.Pass, r.Diff, wantDiff[i])
		}
		if len(r.Steps) == 0 || r.Steps[len(r.Steps)-1].Rule != r.Got.Rule {
			t.Errorf("case %q: steps %+v do not end at %s", r.Case.Name, r.Steps, r.Got.Rule)
		}
	}
}
