package policy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
			d := p.Evaluate(tt.agent, tt.tool)
			if d.Action != tt.action || d.Rule != tt.rule || d.Reason != tt.reason {
				t.Errorf("Evaluate(%q, %q) = {%s %s %q}, want {%s %s %q}",
					tt.agent, tt.tool, d.Action, d.Rule, d.Reason, tt.action, tt.rule, tt.reason)
			}
			if d.Version != "v7" {
				t.Errorf("Version = %q, want v7", d.Version)
			}
		})
	}
}

func TestEvaluateGateSettings(t *testing.T) {
	p := mustParse(t, orderPolicy)

	got := p.Evaluate("sales-bot", "db.delete")
	want := policy.Decision{
		Action: policy.ActionRequireApproval, Rule: "db-writes", Version: "v7",
		Risk: contracts.RiskCritical, Approvers: []string{"alice", "bob", "carol"}, Quorum: 2,
		Veto: false, AllowSelfApproval: true, Timeout: 90 * time.Minute, OnTimeout: contracts.OnTimeoutApprove,
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit},
		Channels:         []string{"slack", "email"}, Summary: "{{tool}} on {{args.table}}",
	}
	assertDecision(t, got, want)

	// A rule that says nothing gets the safe settings.
	got = p.Evaluate("sales-bot", "unknown")
	want = policy.Decision{
		Action: policy.ActionRequireApproval, Rule: "default", Version: "v7",
		Risk: contracts.RiskMedium, Quorum: 1, Veto: true, Timeout: policy.DefaultTimeout,
		OnTimeout:        contracts.OnTimeoutReject,
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
	}
	assertDecision(t, got, want)
}

func assertDecision(t *testing.T, got, want policy.Decision) {
	t.Helper()
	if got.Action != want.Action || got.Rule != want.Rule || got.Version != want.Version ||
		got.Reason != want.Reason || got.Risk != want.Risk || got.Quorum != want.Quorum ||
		got.Veto != want.Veto || got.AllowSelfApproval != want.AllowSelfApproval ||
		got.Timeout != want.Timeout || got.OnTimeout != want.OnTimeout || got.Summary != want.Summary ||
		!slices.Equal(got.Approvers, want.Approvers) || !slices.Equal(got.AllowedDecisions, want.AllowedDecisions) ||
		!slices.Equal(got.Channels, want.Channels) {
		t.Errorf("decision\n got  %+v\n want %+v", got, want)
	}
}

func TestEvaluateReturnsCopies(t *testing.T) {
	p := mustParse(t, orderPolicy)
	d := p.Evaluate("sales-bot", "db.delete")
	d.Approvers[0] = "mallory"
	d.AllowedDecisions[0] = "edit"
	d.Channels[0] = "nowhere"
	again := p.Evaluate("sales-bot", "db.delete")
	if again.Approvers[0] != "alice" || again.AllowedDecisions[0] != "approve" || again.Channels[0] != "slack" {
		t.Fatalf("mutating a decision changed the policy: %+v", again)
	}
}

func TestDefaultAction(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		action string
		reason string
	}{
		{"omitted", "rules:\n  - tools: [a]\n    action: allow\n", policy.ActionRequireApproval, ""},
		{"empty string", "default: \"\"\nrules:\n  - tools: [a]\n    action: allow\n", policy.ActionRequireApproval, ""},
		{"no rules", "version: x\n", policy.ActionRequireApproval, ""},
		{"require_approval", "default: require_approval\n", policy.ActionRequireApproval, ""},
		{"allow", "default: allow\n", policy.ActionAllow, ""},
		{"deny", "default: deny\n", policy.ActionDeny, "No policy rule allows this tool."},
		{"deny with reason", "default: deny\ndefault_rule:\n  reason: Ask first.\n", policy.ActionDeny, "Ask first."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustParse(t, tt.src).Evaluate("agent", "unmatched.tool")
			if d.Action != tt.action || d.Rule != "default" || d.Reason != tt.reason {
				t.Errorf("got {%s %s %q}, want {%s default %q}", d.Action, d.Rule, d.Reason, tt.action, tt.reason)
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
`)
	d := p.Evaluate("a", "anything")
	if d.Action != policy.ActionRequireApproval || d.Risk != contracts.RiskHigh || d.Timeout != 2*time.Hour ||
		!slices.Equal(d.Approvers, []string{"ops"}) || !slices.Equal(d.Channels, []string{"webhook"}) || d.Quorum != 1 {
		t.Fatalf("default_rule settings not applied: %+v", d)
	}
}

func TestBuiltinDefault(t *testing.T) {
	d := policy.Default().Evaluate("any", "tool")
	if d.Action != policy.ActionRequireApproval || d.Rule != "default" {
		t.Fatalf("builtin policy: %+v, want require_approval by default", d)
	}
}

func TestRuleNames(t *testing.T) {
	p := mustParse(t, "rules:\n  - tools: [a]\n    action: allow\n  - tools: [b]\n    action: deny\n")
	if got := p.Evaluate("x", "b"); got.Rule != "rule-2" || got.Reason != `Policy rule "rule-2" denies this tool.` {
		t.Fatalf("unnamed rule: %+v", got)
	}
}

func TestParseErrors(t *testing.T) {
	rule := func(extra string) string {
		return "rules:\n  - name: r\n    tools: [\"a.*\"]\n    action: require_approval\n" + extra
	}
	tests := []struct {
		name string
		src  string
		want []string // every substring must appear in the error
	}{
		{"empty file", "", []string{"empty"}},
		{"only comments", "# nothing here\n", []string{"empty"}},
		{"null document", "~\n", []string{"empty"}},
		{"bare separator", "---\n", []string{"empty"}},
		{"not a mapping", "- a\n- b\n", []string{"cannot unmarshal"}},
		{"syntax", "rules: [\n", []string{"policy: yaml"}},
		{"second document", "default: allow\n---\ndefault: deny\n", []string{"line 2", "second YAML document"}},
		{"unknown top-level field", "defualt: allow\n", []string{"line 1", "defualt"}},
		{"unknown rule field", rule("    actoin: allow\n"), []string{"line 5", "actoin"}},
		{"unknown default_rule field", "default_rule:\n  riks: high\n", []string{"riks"}},
		{"unknown default action", "default: permit\n", []string{"default", `"permit"`}},
		{"unknown rule action", "rules:\n  - name: r\n    tools: [a]\n    action: approve\n",
			[]string{"rules[0] (line 2)", `unknown action "approve"`}},
		{"missing action", "rules:\n  - tools: [a]\n", []string{"rules[0]", `unknown action ""`}},
		{"no tools", "rules:\n  - name: r\n    action: allow\n", []string{"rules[0]", "tools must list"}},
		{"empty tool glob", "rules:\n  - tools: [\"\"]\n    action: allow\n", []string{"tools[0]", "empty glob"}},
		{"bracket glob", "rules:\n  - tools: [ok, \"db.[a-z]*\"]\n    action: deny\n", []string{"tools[1]", `"db.[a-z]*"`, "wildcards"}},
		{"brace glob", "rules:\n  - tools: [\"{a,b}\"]\n    action: deny\n", []string{"tools[0]", "wildcards"}},
		{"spaced glob", "rules:\n  - tools: [\" shell.*\"]\n    action: deny\n", []string{"tools[0]", "space"}},
		{"bad agent glob", "rules:\n  - tools: [a]\n    agents: [\"bot\\\\1\"]\n    action: allow\n", []string{"agents[0]", "wildcards"}},
		{"bad duration", rule("    timeout: 90\n"), []string{"line 5", `invalid duration "90"`}},
		{"bad duration word", rule("    timeout: soon\n"), []string{`invalid duration "soon"`}},
		{"duration not a scalar", rule("    timeout: [1h]\n"), []string{"line 5"}},
		{"negative timeout", rule("    timeout: -1h\n"), []string{"rules[0]", "timeout -1h0m0s must be positive"}},
		{"unknown risk", rule("    risk: extreme\n"), []string{"rules[0]", `unknown risk "extreme"`}},
		{"unknown on_timeout", rule("    on_timeout: escalate\n"), []string{"on_timeout", `"escalate"`}},
		{"unknown decision", rule("    allowed_decisions: [approve, maybe]\n"), []string{`unknown decision "maybe"`}},
		{"quorum too big", rule("    approvers: [a]\n    quorum: 2\n"), []string{"quorum 2 cannot be met by 1"}},
		{"quorum of duplicates", rule("    approvers: [a, a]\n    quorum: 2\n"), []string{`"a" is listed twice`, "quorum 2 cannot be met by 1 distinct"}},
		{"negative quorum", rule("    quorum: -1\n"), []string{"quorum -1 must not be negative"}},
		{"empty approver", rule("    approvers: [\"\"]\n"), []string{"approvers[0] is empty"}},
		{"duplicate name", "rules:\n  - name: r\n    tools: [a]\n    action: allow\n  - name: r\n    tools: [b]\n    action: deny\n",
			[]string{"rules[1] (line 5)", `duplicate rule name "r"`}},
		{"reserved name", "rules:\n  - name: default\n    tools: [a]\n    action: allow\n", []string{`"default" is reserved`}},
		{"default_rule action", "default_rule:\n  action: allow\n", []string{"default_rule", "action cannot be set"}},
		{"default_rule tools", "default_rule:\n  tools: [a]\n", []string{"default_rule", "tools and agents"}},
		{"default_rule name", "default_rule:\n  name: fallback\n", []string{"default_rule", "name cannot be set"}},
		{"default_rule risk", "default_rule:\n  risk: huge\n", []string{"policy: default_rule", `unknown risk "huge"`}},
		{"wrong type", "rules:\n  - tools: a\n    action: allow\n", []string{"line 2", "cannot unmarshal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want an error", p)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestParseReportsEveryProblem checks that validation does not stop at the
// first bad rule: one run of `policy lint` shows them all.
func TestParseReportsEveryProblem(t *testing.T) {
	_, err := policy.Parse([]byte("default: maybe\nrules:\n  - tools: [a]\n    action: nope\n  - tools: []\n    action: allow\n"))
	if err == nil {
		t.Fatal("want an error")
	}
	for _, w := range []string{`default: unknown action "maybe"`, `rules[0] (line 3): unknown action "nope"`, "rules[1] (line 5): tools must list"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestParseAcceptsTrailingSeparator(t *testing.T) {
	p := mustParse(t, "default: allow\n---\n")
	if d := p.Evaluate("a", "b"); d.Action != policy.ActionAllow {
		t.Fatalf("got %+v", d)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("default: permit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "permit") {
		t.Errorf("Load(bad) = %v, want an error naming the file and the problem", err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := policy.Load(missing); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing) = %v, want an error naming the file", err)
	}
}

func TestLoadDeployPolicy(t *testing.T) {
	p, err := policy.Load("../../deploy/policy.yaml")
	if err != nil {
		t.Fatalf("deploy/policy.yaml: %v", err)
	}
	if p.Default != policy.ActionRequireApproval {
		t.Errorf("shipped default = %q, want require_approval", p.Default)
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
		d := p.Evaluate("any-agent", tt.tool)
		if d.Action != tt.action || d.Rule != tt.rule {
			t.Errorf("%s: got {%s %s}, want {%s %s}", tt.tool, d.Action, d.Rule, tt.action, tt.rule)
		}
	}
	if d := p.Evaluate("a", "db.drop_table"); d.Risk != contracts.RiskCritical || d.Timeout != 2*time.Hour {
		t.Errorf("production-database settings: %+v", d)
	}
	if d := p.Evaluate("a", "shell.run"); d.Reason == "" || !strings.Contains(d.Reason, "shell") {
		t.Errorf("no-shell reason = %q", d.Reason)
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
		{"a*a*b", "aaaaaaaaaaaaaaaaaaac", false},
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
	}
}

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
	for _, s := range [][2]string{{"db.*", "db.query"}, {"a*b?c", "axxbyc"}, {"*x", "*yx"}, {"??", "é"}, {"*?*", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, glob, name string) {
		if !utf8.ValidString(glob) || !utf8.ValidString(name) || len(glob) > 64 || len(name) > 256 {
			return // outside what the reference handles
		}
		if got, want := policy.Match(glob, name), globRegexp(glob).MatchString(name); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", glob, name, got, want)
		}
	})
}

// FuzzParse checks that no input makes Parse or Evaluate panic, and that a
// policy that parses always decides one of the three actions.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../../deploy/policy.yaml"); err == nil {
		f.Add(data, "agent", "payments.send")
	}
	f.Add([]byte(orderPolicy), "ops-bot", "db.restart")
	f.Add([]byte(""), "", "")
	f.Add([]byte("default: deny\ndefault_rule: {reason: x}\n"), "a", "b")
	f.Add([]byte("rules:\n  - &r {tools: [a], action: allow}\n  - *r\n"), "a", "a")
	f.Add([]byte("a: &a [*a]\n"), "a", "a")
	f.Add([]byte("rules: [{tools: ['*'], action: deny, timeout: 1h, quorum: 1, approvers: [x]}]\n---\n"), "a", "b")
	f.Fuzz(func(t *testing.T, data []byte, agent, tool string) {
		p, err := policy.Parse(data)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned a policy and an error: %v", err)
			}
			return
		}
		d := p.Evaluate(agent, tool)
		switch d.Action {
		case policy.ActionAllow, policy.ActionRequireApproval:
		case policy.ActionDeny:
			if d.Reason == "" {
				t.Fatal("deny without a reason")
			}
		default:
			t.Fatalf("Evaluate returned action %q", d.Action)
		}
		if d.Rule == "" || d.Quorum < 1 || d.Timeout <= 0 {
			t.Fatalf("incomplete decision %+v", d)
		}
	})
}
