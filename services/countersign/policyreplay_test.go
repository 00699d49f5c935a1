package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/api/oversight"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// TestPolicyReplayCommand: `countersign policy replay` prints, per rule of
// the candidate, what would change for the recorded requests, with
// examples; --json prints the API's report; an approver is refused with
// the API's reason.
func TestPolicyReplayCommand(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter)})
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	gate := countersigntest.Gate(t, apiJS, orchestrator.StaticPolicy{P: countersigntest.Policy(t, cliPolicy)})
	flags := map[string][]string{}
	var tokens []api.Token
	for _, u := range []struct{ subject, role string }{{"alice", api.RoleApprover}, {"audrey", api.RoleAuditor}} {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		flags[u.subject] = []string{"--token", tok}
		tokens = append(tokens, api.Token{Name: u.subject, Subject: u.subject, SHA256: hash, Roles: []string{u.role}})
	}
	reg := prometheus.NewRegistry()
	s, err := api.New(context.Background(), api.Config{JS: apiJS, Gate: gate, Registerer: reg, Gatherer: reg, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	as := func(who string) *cliStack {
		return &cliStack{gate: gate, url: hs.URL, flags: append([]string{"--url", hs.URL}, flags[who]...)}
	}
	small := as("alice").submit(t, orchestrator.ToolCall{ID: "r1", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":5}`)})
	as("alice").submit(t, orchestrator.ToolCall{ID: "r2", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":500}`)})
	candidate := filepath.Join(t.TempDir(), "candidate.yaml")
	if err := os.WriteFile(candidate, []byte(strings.Replace(cliPolicy, "rules:\n", `rules:
  - name: small-refunds
    tools: ["stripe.refund"]
    when: args.amount < 100
    action: allow
`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := as("audrey").cli(t, "policy", "replay", candidate, "--since", "1h", "--quiet")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	for _, want := range []string{"Replayed 2 requests", "1 would change", "small-refunds", "action require_approval → allow",
		small + " (stripe.refund, billing-bot)", "allowed or denied outright"} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
	out, err = as("audrey").cli(t, "policy", "replay", candidate, "--json")
	var rep replayReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Requests != 2 || rep.Changed != 1 {
		t.Errorf("replay --json: %v\n%s", err, out)
	}
	if out, err := as("alice").cli(t, "policy", "replay", candidate); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("an approver's replay: %v\n%s", err, out)
	}
}

// TestPolicyLintAndTestNameShadowRules: lint and test name a policy's
// shadow rules, and test says what each would decide for a case.
func TestPolicyLintAndTestNameShadowRules(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	cases := filepath.Join(dir, "cases.yaml")
	if err := os.WriteFile(pol, []byte(`version: s1
default: require_approval
rules:
  - {name: deny-reads, mode: shadow, tools: ["read_*"], action: deny}
  - {name: reads, tools: ["read_*"], action: allow}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cases, []byte("- {tool: read_file, agent: a, expect: {action: allow, rule: reads}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cmdPolicy([]string{"lint", pol}, &out); err != nil {
		t.Fatalf("lint: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "1 shadow rule(s), evaluated and recorded, never enforced: deny-reads (line 4, deny)") {
		t.Errorf("lint:\n%s", out.String())
	}
	out.Reset()
	if err := cmdPolicy([]string{"test", pol, cases}, &out); err != nil {
		t.Fatalf("test: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "shadow rule deny-reads would decide deny (a flip from allow)") {
		t.Errorf("test:\n%s", out.String())
	}
}

// TestOversightPrintsShadowRules: the terminal report has a row per shadow
// rule, with its flips by direction, and nothing without shadow rules.
func TestOversightPrintsShadowRules(t *testing.T) {
	var out bytes.Buffer
	printOversightShadow(&out, nil)
	if out.Len() != 0 {
		t.Errorf("without shadow rules: %q", out.String())
	}
	printOversightShadow(&out, []oversight.ShadowStats{{Rule: "deny-large", Requests: 3, Flipped: 2,
		Flips: []oversight.Flip{{From: "require_approval", To: "deny", Count: 2}}}})
	if !strings.Contains(out.String(), "deny-large") || !strings.Contains(out.String(), "require_approval → deny: 2") {
		t.Errorf("shadow rows:\n%s", out.String())
	}
}
