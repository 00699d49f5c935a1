package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const frozenPolicy = `version: "freeze-1"
default: require_approval
rules:
  - name: tiny-payments
    tools: ["payments.*"]
    when: 'args.amount < 20 && args.currency == "EUR"'
    action: allow
  - name: frozen
    tools: ["payments.*"]
    action: deny
    reason: "Payments above 20 EUR are frozen this week."
`

// TestPolicyApplyIsLiveAndDurable applies a policy with the CLI, sees the
// running server decide with it, and finds it still in force after a kill -9
// and a restart with the old policy file.
func TestPolicyApplyIsLiveAndDurable(t *testing.T) {
	data := t.TempDir()
	p := startServe(t, data)
	file := filepath.Join(t.TempDir(), "freeze.yaml")
	if err := os.WriteFile(file, []byte(frozenPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := p.cli("policy", "lint", file); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("lint: %v\n%s", err, out)
	}
	out, err := p.cli("policy", "apply", file)
	if err != nil || !strings.Contains(out, "Applied policy version freeze-1") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	check := func(p *serveProc, runID string) {
		t.Helper()
		var ans reviewAnswer
		body := map[string]any{
			"run": map[string]any{"id": runID, "agent": "billing-bot"},
			"tool_calls": []map[string]any{
				{"id": "small", "name": "payments.send", "arguments": map[string]any{"amount": 12, "currency": "EUR"}},
				{"id": "big", "name": "payments.send", "arguments": map[string]any{"amount": 12000, "currency": "EUR"}},
			},
		}
		if code := p.call("POST", "/v1/reviews", body, &ans); code != 200 {
			t.Fatalf("review: %d", code)
		}
		if ans.Results[0].Verdict != "allowed" || ans.Results[0].Rule != "tiny-payments" {
			t.Fatalf("small payment: %+v", ans.Results[0])
		}
		if ans.Results[1].Verdict != "denied" || !strings.Contains(ans.Results[1].Reason, "frozen") {
			t.Fatalf("big payment: %+v", ans.Results[1])
		}
	}
	check(p, "run-live")
	if out, err := p.cli("policy", "show"); err != nil || !strings.Contains(out, "freeze-1") {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if out, err := p.cli("policy", "apply", file); err != nil || !strings.Contains(out, "already live") {
		t.Fatalf("re-apply: %v\n%s", err, out)
	}

	p.kill()
	// Restarted with deploy/policy.yaml: the applied policy stays in force.
	p2 := startServe(t, data)
	check(p2, "run-after-restart")

	// A broken file is refused with its line, and nothing changes.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: x\nrules:\n  - name: a\n    tools: [\"*\"]\n    action: perhaps\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = p2.cli("policy", "apply", bad)
	if err == nil || !strings.Contains(out, bad+":5") {
		t.Fatalf("apply of a broken policy: err %v\n%s", err, out)
	}
	check(p2, "run-after-bad-apply")
}
