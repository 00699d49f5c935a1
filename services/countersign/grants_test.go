package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

// waitGrant waits (a KV watch) until the arbiter stored grant id and cond holds.
func (c *cliStack) waitGrant(t *testing.T, id string, cond func(*contracts.Grant) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.js.KeyValue(ctx, contracts.BucketGrants)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		var g contracts.Grant
		if e != nil && json.Unmarshal(e.Value(), &g) == nil && cond(&g) {
			// The stack's gate has it in its book too.
			if err := c.gate.Grants().Await(ctx, id); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("grant %s: the condition never held", id)
}

func TestCLIGrantApproveListShowRevoke(t *testing.T) {
	c := newCLIStack(t)
	args := json.RawMessage(`{"amount":30,"currency":"eur"}`)
	id := c.submit(t, orchestrator.ToolCall{ID: "r-1", Name: "stripe.refund", Arguments: args})

	if out, err := c.cli(t, "approvals", "approve", id, "--grant", "agent", "--ttl", "1h"); err == nil || !strings.Contains(out+err.Error(), "grant_not_allowed") {
		t.Fatalf("a grant beyond the rule: %v\n%s", err, out)
	}
	if _, err := c.cli(t, "approvals", "approve", id, "--grant", "run"); err == nil || !strings.Contains(err.Error(), "--ttl") {
		t.Fatalf("--grant without --ttl: %v", err)
	}
	out, err := c.cli(t, "approvals", "approve", id, "--grant", "run", "--ttl", "1h")
	if err != nil || !strings.Contains(out, "Grant asked for (run, 1h)") {
		t.Fatalf("approve --grant run: %v\n%s", err, out)
	}
	c.waitGrant(t, id, func(*contracts.Grant) bool { return true })

	v, err := c.gate.Submit(context.Background(), contracts.Run{ID: "run-cli", Agent: "billing-bot"},
		[]orchestrator.ToolCall{{ID: "r-2", Name: "stripe.refund", Arguments: args}})
	if err != nil || v[0].GrantID != id {
		t.Fatalf("the next call of the run: %+v %v", v, err)
	}
	out, err = c.cli(t, "grants", "ls")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "active") || !strings.Contains(out, "in run run-cli") {
		t.Fatalf("grants ls: %v\n%s", err, out)
	}
	out, err = c.cli(t, "grants", "show", id)
	if err != nil || !strings.Contains(out, "issued by alice") || !strings.Contains(out, "used by billing-bot: run run-cli, call r-2") {
		t.Fatalf("grants show: %v\n%s", err, out)
	}
	out, err = c.cli(t, "grants", "revoke", id)
	if err != nil || !strings.Contains(out, "revoked by alice") {
		t.Fatalf("grants revoke: %v\n%s", err, out)
	}
	v, err = c.gate.Submit(context.Background(), contracts.Run{ID: "run-cli", Agent: "billing-bot"},
		[]orchestrator.ToolCall{{ID: "r-3", Name: "stripe.refund", Arguments: args}})
	if err != nil || v[0].Verdict != orchestrator.VerdictPending {
		t.Fatalf("a call after the revocation: %+v %v", v, err)
	}
	if out, _ := c.cli(t, "grants", "ls"); !strings.Contains(out, "No grants.") {
		t.Fatalf("active grants after the revocation:\n%s", out)
	}
}

// TestCLIPolicyApplyNamesStoppedGrants: a dry run of a version whose rule
// no longer permits run grants names the active run grant it would stop.
func TestCLIPolicyApplyNamesStoppedGrants(t *testing.T) {
	c := newCLIStack(t)
	id := c.submit(t, orchestrator.ToolCall{ID: "p-1", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":30}`)})
	if out, err := c.cli(t, "approvals", "approve", id, "--grant", "run", "--ttl", "1h"); err != nil {
		t.Fatalf("approve --grant run: %v\n%s", err, out)
	}
	c.waitGrant(t, id, func(*contracts.Grant) bool { return true })
	narrower := strings.Replace(strings.Replace(cliPolicy, "scopes: [call, run]", "scopes: [call]", 1), `"cli-1"`, `"cli-2"`, 1)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(narrower), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := c.admin(t, "policy", "apply", "--dry-run", file)
	if err != nil || !strings.Contains(out, "This version would stop 1 active grant(s)") ||
		!strings.Contains(out, id+"  stripe.refund for agent billing-bot, run run-cli (run grant): rule refunds no longer permits") {
		t.Fatalf("policy apply --dry-run: %v\n%s", err, out)
	}
	if out, err := c.admin(t, "policy", "apply", "--dry-run", writeFile(t, cliPolicy)); err != nil || strings.Contains(out, "grant") {
		t.Fatalf("a version that permits the grant: %v\n%s", err, out)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
