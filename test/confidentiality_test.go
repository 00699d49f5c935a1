package test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tenantsPolicy gates refunds for alice and gina, and marks the SSN
// sensitive.
const tenantsPolicy = `version: "tenants-e2e"
default: require_approval
rules:
  - name: refunds
    tools: ["billing.refund"]
    action: require_approval
    approvers: [alice, gina]
    sensitive: ["/ssn"]
`

// cliAs runs the CLI against p with token.
func (p *serveProc) cliAs(token string, args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+p.url, "COUNTERSIGN_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// With two tenants in the directory, the CLI shows a request to the
// approver of its tenant (the SSN included) and its tenant's auditor (the
// SSN masked), and to an approver of the other tenant and an approver it
// does not name, nothing: not in the list, not by id, not in the audit.
func TestCLIShowsEachPersonOnlyWhatTheyMayDecideOrAudit(t *testing.T) {
	dir := t.TempDir()
	tokens := map[string]string{}
	var users strings.Builder
	users.WriteString("users:\n")
	for _, u := range []struct{ id, tenants, roles, agents string }{
		{"alice", "[acme]", "[approver]", ""}, {"gina", "[globex]", "[approver]", ""},
		{"carol", "[]", "[approver]", ""}, {"audrey", "[acme]", "[auditor]", ""},
		{"bot", "[acme]", "[agent]", ", agents: [\"billing-*\"]"},
	} {
		tokens[u.id] = newPerson(u.id, "").token
		sum := sha256.Sum256([]byte(tokens[u.id]))
		fmt.Fprintf(&users, "  - id: %s\n    tenants: %s\n    tokens: [{sha256: %s, roles: %s%s}]\n", u.id, u.tenants, hex.EncodeToString(sum[:]), u.roles, u.agents)
	}
	dirFile, polFile := filepath.Join(dir, "directory.yaml"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(dirFile, []byte(users.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(polFile, []byte(tenantsPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, t.TempDir(), "--policy", polFile, "--directory", dirFile)
	var ans reviewAnswer
	body := map[string]any{
		"run":        map[string]any{"id": "run-tenants", "agent": "billing-bot"},
		"tool_calls": []map[string]any{{"id": "refund", "name": "billing.refund", "arguments": map[string]any{"amount": 10, "ssn": "123-45-6789"}}},
	}
	if code := p.callAs(tokens["bot"], "POST", "/v1/reviews", body, &ans); code != 200 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review: %d %+v", code, ans)
	}
	id := ans.Results[0].EventID
	for who, sees := range map[string]bool{"alice": true, "audrey": false} {
		out, err := p.cliAs(tokens[who], "approvals", "show", id)
		if err != nil || !strings.Contains(out, id) || strings.Contains(out, "123-45-6789") != sees {
			t.Fatalf("approvals show as %s (sees the SSN: %v): %v\n%s", who, sees, err, out)
		}
		if out, err := p.cliAs(tokens[who], "approvals", "list"); err != nil || !strings.Contains(out, id[:8]) {
			t.Fatalf("approvals list as %s: %v\n%s", who, err, out)
		}
	}
	for _, who := range []string{"gina", "carol"} {
		if out, err := p.cliAs(tokens[who], "approvals", "show", id); err == nil || !strings.Contains(out, "unknown_event") {
			t.Fatalf("approvals show as %s: %v\n%s", who, err, out)
		}
		if out, err := p.cliAs(tokens[who], "audit", id); err == nil || !strings.Contains(out, "unknown_event") {
			t.Fatalf("audit as %s: %v\n%s", who, err, out)
		}
		if out, _ := p.cliAs(tokens[who], "approvals", "list"); strings.Contains(out, id[:8]) {
			t.Fatalf("approvals list as %s shows the request:\n%s", who, out)
		}
	}
	// audrey's audit export is itself in the audit trail, via the CLI.
	if _, err := p.cliAs(tokens["audrey"], "audit", id); err != nil {
		t.Fatal(err)
	}
	out, err := p.cliAs(tokens["alice"], "audit", "--json", id)
	if err != nil || !strings.Contains(out, `"reader": "audrey"`) || !strings.Contains(out, `"surface": "cli"`) {
		t.Fatalf("audit trail after audrey's export: %v\n%s", err, out)
	}
}
