package policy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// globRegexp is a reference implementation of Match.
func globRegexp(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`\z`)
	return regexp.MustCompile(b.String())
}

func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"db.*", "db.query"}, {"a*b?c", "axxbyc"}, {"*x", "*yx"}, {"??", "é"}, {"*?*", ""}, {"ab*ba", "aba"}, {"a*a*a", "aaa"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, glob, name string) {
		if !utf8.ValidString(glob) || !utf8.ValidString(name) || len(glob) > 64 || len(name) > 256 {
			return // outside what the reference handles
		}
		want := globRegexp(glob).MatchString(name)
		if got := policy.Match(glob, name); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", glob, name, got, want)
		}
	})
}

// FuzzParse checks that no input makes Parse, Lint, Evaluate or Explain
// panic, that Parse and Lint agree, and that a policy that parses always
// decides one of the three actions, the same way in Evaluate and Explain,
// and never allows when a condition errored.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../../deploy/policy.yaml"); err == nil {
		f.Add(data, "agent", "payments.send", `{"amount": 5}`)
	}
	examples, _ := filepath.Glob("../../deploy/policies/*.yaml")
	for _, e := range examples {
		if data, err := os.ReadFile(e); err == nil && !strings.HasSuffix(e, ".cases.yaml") {
			f.Add(data, "billing-bot", "payments.send", `{"amount": 250, "currency": "EUR"}`)
		}
	}
	f.Add([]byte(orderPolicy), "ops-bot", "db.restart", `{}`)
	f.Add([]byte(conditionPolicy), "a", "payments.send", `{"amount": 250}`)
	f.Add([]byte(conditionPolicy), "a", "deploy", `{"targets": [{"env": "prod"}]}`)
	f.Add([]byte(""), "", "", "")
	f.Add([]byte("default: deny\ndefault_rule: {reason: x}\n"), "a", "b", "null")
	f.Add([]byte("rules:\n  - &r {name: a, tools: [a], action: allow}\n  - *r\n"), "a", "a", "")
	f.Add([]byte("rules:\n  - &r {name: a, tools: [a], action: allow}\n  - {<<: *r, name: b}\n"), "a", "a", "")
	f.Add([]byte("a: &a [*a]\n"), "a", "a", "")
	f.Add([]byte("rules: [{name: x, tools: ['*'], when: 'args.x.y[0] > 1.5', action: allow, timeout: 1h, quorum: 1, approvers: [x]}]\n---\n"), "a", "b", `{"x": {"y": [2]}}`)
	f.Add([]byte("rules: [{name: x, agents: ['*'], when: 'size(run) > 0 && run.labels.a == \"b\"', action: allow}]\n"), "a", "b", `{}`)
	f.Add([]byte("groups: {g: [a]}\nrisk_defaults: {high: {quorum: 1}}\nrules: [{name: x, tools: [t], action: require_approval, risk: high, approvers: ['group:g']}]\n"), "a", "t", `{}`)
	f.Fuzz(func(t *testing.T, data []byte, agent, tool, args string) {
		p, err := policy.Parse(data)
		problems := policy.Lint(data)
		lintErrors := 0
		for _, pr := range problems {
			if pr.Severity == policy.SeverityError {
				lintErrors++
			}
		}
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned a policy and an error: %v", err)
			}
			if lintErrors == 0 {
				t.Fatalf("Parse refused (%v) but Lint found no error", err)
			}
			return
		}
		if lintErrors != 0 {
			t.Fatalf("Parse accepted but Lint found errors: %v", problems)
		}
		in := policy.Input{Run: contracts.Run{Agent: agent, Tenant: agent, Labels: map[string]string{"a": tool}}, Tool: tool, Arguments: json.RawMessage(args)}
		d := p.Evaluate(in)
		switch d.Action {
		case policy.ActionAllow, policy.ActionRequireApproval:
		case policy.ActionDeny:
			if d.Reason == "" {
				t.Fatal("deny without a reason")
			}
		default:
			t.Fatalf("Evaluate returned action %q", d.Action)
		}
		if d.Error != "" && d.Action == policy.ActionAllow {
			t.Fatalf("a condition errored (%s) and the call was allowed: %+v", d.Error, d)
		}
		if d.Rule == "" || d.Quorum < 1 || d.Timeout <= 0 || d.Version != p.Version() {
			t.Fatalf("incomplete decision %+v", d)
		}
		e, steps := p.Explain(in)
		if e.Action != d.Action || e.Rule != d.Rule || e.Error != d.Error || len(steps) == 0 || steps[len(steps)-1].Rule != d.Rule {
			t.Fatalf("Explain decided %+v (steps %+v), Evaluate %+v", e, steps, d)
		}
	})
}

// FuzzParseCases checks that no input makes ParseCases panic.
func FuzzParseCases(f *testing.F) {
	examples, _ := filepath.Glob("../../deploy/policies/*.cases.yaml")
	for _, e := range examples {
		if data, err := os.ReadFile(e); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("- {tool: a, expect: {action: allow}, args: {a: [1, 2.5, true, null, {b: c}]}}\n"))
	f.Add([]byte("- {tool: a, expect: {action: allow}, args: &a {x: *a}}\n"))
	f.Add([]byte("- {tool: a, expect: {rule: r}, agent: x, run: {agent: y}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cases, err := policy.ParseCases(data)
		if err != nil {
			if cases != nil {
				t.Fatal("cases and an error")
			}
			return
		}
		for _, c := range cases {
			if !json.Valid(c.Arguments) || c.Tool == "" {
				t.Fatalf("case %+v", c)
			}
		}
		policy.RunCases(policy.Default(), cases)
	})
}

// FuzzCondition feeds arbitrary conditions and arguments through a rule:
// compiling never panics, and evaluating never panics, always decides, and
// never allows when the condition errored.
func FuzzCondition(f *testing.F) {
	for _, s := range [][2]string{
		{`args.amount > 100 && run.tenant == "prod"`, `{"amount": 250.5}`},
		{`args.items.exists(i, i.name.startsWith("x"))`, `{"items": [{"name": "xy"}, 3]}`},
		{`args.?a.orValue(0) + 1 > size(args)`, `{"a": 9223372036854775807}`},
		{`args.s.matches(args.re)`, `{"s": "a", "re": "("}`},
		{`labels.env in ["prod"] || tool.split(".")[1] == agent`, `{}`},
		{`int(args.x) / 0 == 1`, `{"x": 1}`},
		{`args.x`, `{"x": "not a bool"}`},
		{`size(run) == 7 && run.labels == labels`, `null`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, when, args string) {
		if len(when) > 512 || strings.ContainsAny(when, "\r\n") {
			return
		}
		src := "rules:\n  - name: r\n    tools: [\"*\"]\n    when: " + strconv.Quote(when) + "\n    action: allow\n"
		p, err := policy.Parse([]byte(src))
		if err != nil {
			return
		}
		in := policy.Input{Run: contracts.Run{Agent: "a", Tenant: "prod", Labels: map[string]string{"env": "prod"}},
			Tool: "x.a", Arguments: json.RawMessage(args)}
		d := p.Evaluate(in)
		switch {
		case d.Error != "" && (d.Action != policy.ActionRequireApproval || d.Rule != "r"):
			t.Fatalf("condition error %q but decision %+v", d.Error, d)
		case d.Error == "" && d.Rule == "r" && d.Action != policy.ActionAllow:
			t.Fatalf("rule r matched without error but decided %+v", d)
		case d.Error == "" && d.Rule != "r" && d.Rule != "default":
			t.Fatalf("decision %+v", d)
		}
		if e, _ := p.Explain(in); e.Action != d.Action || e.Rule != d.Rule || e.Error != d.Error {
			t.Fatalf("Explain %+v, Evaluate %+v", e, d)
		}
	})
}
