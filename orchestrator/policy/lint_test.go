package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/orchestrator/policy"
)

func TestLint(t *testing.T) {
	type want struct {
		line, col int
		severity  string
		message   string // substring
	}
	tests := []struct {
		name string
		src  string
		want []want // exactly these problems, in order
	}{
		{"clean", `
version: "1"
groups: {finance: [alice, bob]}
rules:
  - name: big
    tools: ["payments.*"]
    when: args.amount > 100
    action: require_approval
    approvers: ["group:finance"]
    quorum: 2
  - name: rest
    tools: ["payments.*"]
    action: allow
`, nil},
		{"unreachable after a catch-all", `
rules:
  - name: everything
    tools: ["*"]
    action: require_approval
  - name: never
    tools: [shell.exec]
    action: deny
`, []want{{6, 5, policy.SeverityWarning, `rule "never" is unreachable: rule "everything" (line 3) comes first`}}},
		{"unreachable by a broader glob", `
rules:
  - name: db
    tools: ["db.*", "sql.*"]
    action: allow
  - name: db-writes
    tools: ["db.delete*", "sql.?pdate"]
    agents: ["x-*"]
    labels: {env: prod}
    when: args.table == "users"
    action: deny
`, []want{{6, 5, policy.SeverityWarning, `rule "db-writes" is unreachable: rule "db" (line 3)`}}},
		{"reachable: the earlier rule has a condition", `
rules:
  - name: a
    tools: ["*"]
    when: tool != "x"
    action: allow
  - name: b
    tools: [x]
    action: deny
`, nil},
		{"reachable: narrower in agents, tenants or labels", `
rules:
  - name: a
    tools: ["*"]
    agents: [bot]
    action: allow
  - name: b
    tools: ["*"]
    tenants: [prod]
    action: allow
  - name: c
    tools: ["*"]
    labels: {env: prod}
    action: allow
  - name: d
    tools: [x]
    action: deny
`, nil},
		{"unreachable: labels of the earlier rule are a subset", `
rules:
  - name: a
    tools: ["*"]
    labels: {env: prod}
    tenants: ["p*"]
    action: allow
  - name: b
    tools: [x]
    labels: {env: prod, team: ops}
    tenants: [prod]
    action: deny
`, []want{{8, 5, policy.SeverityWarning, `rule "b" is unreachable`}}},
		{"reachable: a glob only partly covered", `
rules:
  - name: a
    tools: ["db.*"]
    action: allow
  - name: b
    tools: ["db.*", "shell"]
    action: deny
`, nil},
		{"a rule without tools is not covered by one with tools", `
rules:
  - name: a
    tools: ["*.x"]
    action: allow
  - name: b
    agents: [bot]
    action: deny
`, nil},
		{"unknown approver group", `
groups: {finance: [alice]}
rules:
  - name: r
    tools: [x]
    action: require_approval
    approvers: [bob, "group:finanse"]
`, []want{{7, 22, policy.SeverityWarning, `unknown approver group "finanse"`}}},
		{"unknown group in default_rule and risk_defaults", `
default_rule: {approvers: ["group:a"]}
risk_defaults:
  high: {approvers: ["group:b"]}
`, []want{
			{2, 28, policy.SeverityWarning, `default_rule: approvers: unknown approver group "a"`},
			{4, 22, policy.SeverityWarning, `risk_defaults.high: approvers: unknown approver group "b"`},
		}},
		{"condition not bool", `
rules:
  - name: r
    tools: [x]
    when: args.amount + 1
    action: allow
`, []want{{5, 11, policy.SeverityError, "must be a bool"}}},
		{"CEL type error", `
rules:
  - name: r
    tools: [x]
    when: 'tenant == 3 || tool.size() > "a"'
    action: allow
`, []want{
			{5, 19, policy.SeverityError, "no matching overload for '_==_'"},
			{5, 39, policy.SeverityError, "no matching overload for '_>_'"},
		}},
		{"settings without effect", `
rules:
  - name: r
    tools: [x]
    action: allow
    approvers: [a]
    reason: why
  - name: d
    tools: [y]
    action: deny
    reason: "kept: deny uses it"
    timeout: 1h
`, []want{
			{6, 5, policy.SeverityWarning, `rule "r": approvers has no effect on a rule whose action is allow`},
			{7, 5, policy.SeverityWarning, `rule "r": reason has no effect`},
			{12, 5, policy.SeverityWarning, `rule "d": timeout has no effect on a rule whose action is deny`},
		}},
		{"default allow", "default: allow\n", []want{{1, 10, policy.SeverityWarning, "default: allow runs every tool"}}},
		{"sequence without approvers", `
rules:
  - name: r
    tools: [x]
    action: require_approval
    order: sequence
`, []want{{3, 5, policy.SeverityWarning, "order: sequence needs approvers"}}},
		{"group member twice", "groups:\n  g: [a, b, a]\n", []want{{2, 13, policy.SeverityWarning, `groups.g: "a" is listed twice`}}},
		{"errors and warnings together, sorted", `
rules:
  - name: all
    tools: ["*"]
    action: allow
  - name: bad
    tools: [x]
    action: explode
`, []want{
			{6, 5, policy.SeverityWarning, `rule "bad" is unreachable`},
			{8, 13, policy.SeverityError, `unknown action "explode"`},
		}},
		{"YAML syntax", "rules: [\n", []want{{0, 0, policy.SeverityError, "YAML syntax"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policy.Lint([]byte(tt.src))
			ok := len(got) == len(tt.want)
			for i := 0; ok && i < len(got); i++ {
				w, g := tt.want[i], got[i]
				ok = (w.line == 0 || g.Line == w.line) && (w.col == 0 || g.Column == w.col) &&
					g.Severity == w.severity && strings.Contains(g.Message, w.message)
			}
			if !ok {
				t.Errorf("Lint =\n%s\nwant\n%v", format(got), tt.want)
			}
			// Parse agrees: it refuses exactly when Lint has an error.
			hasError := false
			for _, p := range got {
				hasError = hasError || p.Severity == policy.SeverityError
			}
			if _, err := policy.Parse([]byte(tt.src)); (err != nil) != hasError {
				t.Errorf("Parse error %v, Lint errors %v", err, hasError)
			}
		})
	}
}

func format(ps []policy.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s %s\n", p.Severity, p)
	}
	return b.String()
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    policy.Problem
		want string
	}{
		{policy.Problem{Line: 3, Column: 7, Message: "m"}, "3:7: m"},
		{policy.Problem{Line: 3, Message: "m"}, "3: m"},
		{policy.Problem{Message: "m"}, "m"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
	err := &policy.Errors{File: "p.yaml", Problems: []policy.Problem{{Line: 1, Column: 2, Message: "a"}, {Message: "b"}}}
	if got, want := err.Error(), "p.yaml:1:2: a\np.yaml: b"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// A YAML syntax error is reported on the line at fault, not on the line
// where the enclosing block began.
func TestLintYAMLSyntaxErrorLine(t *testing.T) {
	var lines []string
	lines = append(lines, "# comment", "# comment", `version: "1"`, "rules:")
	for i := 0; len(lines) < 19; i++ {
		lines = append(lines, fmt.Sprintf("  - name: r%d", i), "    tools: [x]", "    action: allow")
	}
	lines = lines[:19]
	tail := []string{"    action: deny", "  - name: last", "    tools: [y]", "    action: allow"}
	for _, tt := range []struct{ name, line20 string }{
		{"a key indented by one", " foo: 1"},
		{"a tab", "\tname: x"},
		{"an unclosed list", "    tools: [a, b"},
		{"two colons", "    reason: a: b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Join(append(append(append([]string{}, lines...), tt.line20), tail...), "\n") + "\n"
			got := policy.Lint([]byte(src))
			if len(got) != 1 || got[0].Line != 20 || !strings.Contains(got[0].Message, "YAML syntax") {
				t.Errorf("Lint =\n%s\nwant one YAML syntax error on line 20 of\n%s", format(got), src)
			}
		})
	}
}
