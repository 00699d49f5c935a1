package test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// grantView is a grant as GET /v1/grants/{grant_id} answers it.
type grantView struct {
	contracts.Grant
	Status string `json:"status"`
}

// grantOf reads a stored grant.
func grantOf(t *testing.T, p *serveProc, id string) grantView {
	t.Helper()
	var g grantView
	if code := p.call("GET", "/v1/grants/"+id, nil, &g); code != http.StatusOK {
		t.Fatalf("grant %s: %d", id, code)
	}
	return g
}

// TestGrantsExamplesRun runs docs/grants.md's examples as written under
// deploy/policy.yaml, whose payments rule permits run and agent grants of
// at most 8h with conditions: the rule it shows is a valid policy rule; the
// CLI's grants and the vote's JSON issue the grants they name; a dry run of
// a version that narrows the rule names the grant it would stop, as shown;
// and the grant is listed, shown with its use, and revoked.
func TestGrantsExamplesRun(t *testing.T) {
	d := readDocExamples(t, "docs/grants.md", "")
	p, addr := makeRunServe(t)
	sh := newDocShell(t, p, addr)

	// The rule it shows is one a policy may hold.
	rule := d.take(t, "yaml", "name: refunds").text
	if _, err := policy.Parse([]byte("version: \"grants-doc-1\"\ndefault: require_approval\n" + rule)); err != nil {
		t.Errorf("docs/grants.md's rule is not a valid policy: %v\n%s", err, rule)
	}

	// Asking for a grant from the CLI.
	ask := d.take(t, "sh", "--grant run --ttl 1h", "--grant agent").shell(t)
	if len(ask) != 2 {
		t.Fatalf("want two approvals asking for grants, got %q", ask)
	}
	wants := []struct{ scope, args, condition string }{{"run", "same", ""}, {"agent", "condition", "args.amount <= 100"}}
	var runGrant string
	for i, cmd := range ask {
		sh.vars["ID"] = pendingPayment(t, p, []string{"run-7", "run-agent-grant"}[i], "call-cli-"+wants[i].scope)
		if out := sh.run(t, cmd); !strings.Contains(out, "Vote counted: approve") {
			t.Errorf("%q:\n%s", cmd, out)
		}
		waitGrant(t, p, sh.vars["ID"])
		g := grantOf(t, p, sh.vars["ID"])
		if g.Scope != wants[i].scope || g.Arguments != wants[i].args || g.Condition != wants[i].condition {
			t.Errorf("%q issued %+v, want scope %s, arguments %s, condition %q", cmd, g, wants[i].scope, wants[i].args, wants[i].condition)
		}
		if i == 0 {
			runGrant = sh.vars["ID"]
		}
	}

	// The same agent grant, as the vote's JSON.
	vote := d.take(t, "json", `"grant": {"scope": "agent"`).text
	id := pendingPayment(t, p, "run-json-grant", "call-1")
	if code := p.call("POST", "/v1/approvals/"+id+"/votes", json.RawMessage(vote), nil); code != http.StatusOK {
		t.Fatalf("the vote %s: %d", vote, code)
	}
	waitGrant(t, p, id)
	if g := grantOf(t, p, id); g.Scope != "agent" || g.Condition != "args.amount <= 100" {
		t.Errorf("the vote %s issued %+v", vote, g)
	}

	// A version whose payments rule no longer permits run grants names the
	// run grant it would stop, as shown (the rule and tool the shipped
	// policy's; 0193… an id).
	shown := strings.Split(strings.TrimSpace(d.take(t, "", "would stop").text), "\n")
	if len(shown) != 2 {
		t.Fatalf("want a header and one grant line, got %q", shown)
	}
	pol, err := os.ReadFile("../deploy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	narrower := strings.Replace(string(pol), "scopes: [call, run, agent]", "scopes: [call, agent]", 1)
	if narrower == string(pol) {
		t.Fatal("deploy/policy.yaml's payments rule no longer permits run grants; update this test")
	}
	file := filepath.Join(sh.dir, "narrower.yaml")
	if err := os.WriteFile(file, []byte(narrower), 0o644); err != nil {
		t.Fatal(err)
	}
	out := sh.run(t, []string{"bin/countersign", "policy", "apply", "--dry-run", "narrower.yaml"})
	line := strings.NewReplacer("0193…", runGrant, "stripe.refund", "payments_send", "rule refunds", "rule payments").Replace(shown[1])
	if !strings.Contains(out, shown[0]) || !strings.Contains(out, line) {
		t.Errorf("policy apply --dry-run printed:\n%s\nwant, as docs/grants.md shows:\n%s\n%s", out, shown[0], line)
	}

	// Listing, showing with its use, revoking.
	if r := reviewOne(t, p, map[string]any{"id": "run-7", "agent": "billing-bot", "requested_by": "carol"},
		map[string]any{"id": "call-covered", "name": "payments_send",
			"arguments": map[string]any{"amount": 1250, "currency": "EUR", "recipient": "Globex GmbH"}}); r["verdict"] != "allowed" || r["grant_id"] != runGrant {
		t.Fatalf("the run's next payment: %v, want allowed by grant %s", r, runGrant)
	}
	sh.vars["GRANT"] = runGrant
	manage := d.take(t, "sh", "grants show $GRANT").shell(t)
	for i, want := range [][]string{{runGrant[:8], "payments_send"}, {runGrant, "call-covered"}, {"revoked"}} {
		out := strings.ToLower(sh.run(t, manage[i]))
		for _, w := range want {
			if !strings.Contains(out, strings.ToLower(w)) {
				t.Errorf("%q does not say %q:\n%s", manage[i], w, out)
			}
		}
	}
	if g := grantOf(t, p, runGrant); g.Status != "revoked" {
		t.Errorf("after %q the grant is %s", manage[2], g.Status)
	}
	d.allRun(t)
}
