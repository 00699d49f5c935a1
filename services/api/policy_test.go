package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

const appliedPolicy = `version: "fleet-2"
default: require_approval
rules:
  - name: small-payments
    tools: ["payments.*"]
    when: 'args.amount <= 100 && run.tenant == "acme"'
    action: allow
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: critical
`

type policyAnswer struct {
	Version   string `json:"version"`
	SHA256    string `json:"sha256"`
	AppliedBy string `json:"applied_by"`
	Revision  uint64 `json:"revision"`
	Live      bool   `json:"live"`
	Source    string `json:"source"`
	Changed   *bool  `json:"changed"`
}

type policyErr struct {
	Error struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		Problems []struct {
			Line     int    `json:"line"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
		} `json:"problems"`
	} `json:"error"`
}

func TestPolicyShowAndApply(t *testing.T) {
	e := setup(t)
	var before policyAnswer
	r := e.call(t, "GET", "/v1/policy", "alice", nil)
	r.decode(t, &before)
	if r.status != http.StatusOK || before.Live || before.Version != "t1" {
		t.Fatalf("before apply: %d %s, want the start-up policy t1, not live", r.status, r.body)
	}

	// Only admins apply.
	e.call(t, "POST", "/v1/policy", "alice", appliedPolicy).wantError(t, http.StatusForbidden, "forbidden", "")
	e.call(t, "POST", "/v1/policy", "agent", appliedPolicy).wantError(t, http.StatusForbidden, "forbidden", "")

	r = e.call(t, "POST", "/v1/policy", "admin", appliedPolicy)
	var applied policyAnswer
	r.decode(t, &applied)
	if r.status != http.StatusOK || !applied.Live || applied.Version != "fleet-2" || applied.AppliedBy != "root" ||
		applied.Changed == nil || !*applied.Changed || applied.Revision == 0 || len(applied.SHA256) != 64 {
		t.Fatalf("apply: %d %s", r.status, r.body)
	}
	// Applying the same content again changes nothing.
	r = e.call(t, "POST", "/v1/policy", "admin", appliedPolicy)
	var again policyAnswer
	r.decode(t, &again)
	if r.status != http.StatusOK || again.Changed == nil || *again.Changed || again.Revision != applied.Revision {
		t.Fatalf("re-apply: %d %s", r.status, r.body)
	}
	// Other content under the same version is refused.
	e.call(t, "POST", "/v1/policy", "admin", strings.Replace(appliedPolicy, "critical", "high", 1)).
		wantError(t, http.StatusConflict, "version_exists", "")

	// Attack: the source names every tenant's rules; an agent or an
	// approver reads the version, not the source.
	for _, who := range []string{"agent", "alice"} {
		e.call(t, "GET", "/v1/policy?source=1", who, nil).wantError(t, http.StatusForbidden, "forbidden", "")
		var plain policyAnswer
		if r := e.call(t, "GET", "/v1/policy", who, nil); r.status != http.StatusOK {
			t.Fatalf("GET /v1/policy as %s: %d", who, r.status)
		} else if r.decode(t, &plain); plain.Source != "" || plain.Version != "fleet-2" {
			t.Fatalf("GET /v1/policy as %s: %s", who, r.body)
		}
	}
	r = e.call(t, "GET", "/v1/policy?source=1", "bob", nil)
	var shown policyAnswer
	r.decode(t, &shown)
	if !shown.Live || shown.Version != "fleet-2" || shown.Source != appliedPolicy || shown.Revision != applied.Revision {
		t.Fatalf("show: %s", r.body)
	}

	// The answer came after this server switched: reviews use the new policy now.
	res := e.review(t, "", contracts.Run{ID: "r1", Agent: "billing-bot", Tenant: "acme"},
		toolCall{ID: "small", Name: "payments.send", Arguments: json.RawMessage(`{"amount":40}`)},
		toolCall{ID: "big", Name: "payments.send", Arguments: json.RawMessage(`{"amount":4000}`)},
	)
	if res[0].Verdict != orchestrator.VerdictAllowed || res[0].Rule != "small-payments" {
		t.Fatalf("small payment: %+v", res[0])
	}
	if res[1].Verdict != orchestrator.VerdictPending || res[1].Rule != "payments" {
		t.Fatalf("big payment: %+v", res[1])
	}
	var rec recordAnswer
	e.call(t, "GET", "/v1/approvals/"+res[1].EventID, "alice", nil).decode(t, &rec)
	if rec.Record.Request.Policy.Version != "fleet-2" || rec.Record.Request.Risk != contracts.RiskCritical {
		t.Fatalf("request policy %+v risk %s, want fleet-2 critical", rec.Record.Request.Policy, rec.Record.Request.Risk)
	}
}

func TestPolicyApplyRefusesInvalidPolicies(t *testing.T) {
	e := setup(t)
	bad := "version: x\nrules:\n  - name: a\n    tools: [\"*\"]\n    action: allow\n    when: 'args.amount >'\n  - name: b\n    tools: [\"x\"]\n    action: sometimes\n"
	r := e.call(t, "POST", "/v1/policy", "admin", bad)
	if r.status != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", r.status, r.body)
	}
	var pe policyErr
	r.decode(t, &pe)
	if pe.Error.Code != "invalid_policy" || len(pe.Error.Problems) < 2 {
		t.Fatalf("error %s, want invalid_policy listing both problems", r.body)
	}
	lines := map[int]bool{}
	for _, p := range pe.Error.Problems {
		lines[p.Line] = true
		if p.Message == "" || p.Severity != "error" {
			t.Errorf("problem %+v", p)
		}
	}
	if !lines[6] || !lines[9] {
		t.Fatalf("problems on lines %v, want 6 (bad CEL) and 9 (bad action)", lines)
	}
	e.call(t, "POST", "/v1/policy", "admin", "").wantError(t, http.StatusBadRequest, "invalid_policy", "")
	e.call(t, "POST", "/v1/policy", "admin", strings.Repeat("#", 2<<20)).wantError(t, http.StatusRequestEntityTooLarge, "body_too_large", "")
	// Nothing was stored.
	var shown policyAnswer
	e.call(t, "GET", "/v1/policy", "admin", nil).decode(t, &shown)
	if shown.Live {
		t.Fatalf("a refused policy went live: %+v", shown)
	}
	// A dry run validates without applying.
	r = e.call(t, "POST", "/v1/policy?dry_run=1", "admin", appliedPolicy)
	var dry policyAnswer
	r.decode(t, &dry)
	if r.status != http.StatusOK || dry.Version != "fleet-2" || dry.Live {
		t.Fatalf("dry run: %d %s", r.status, r.body)
	}
	e.call(t, "GET", "/v1/policy", "admin", nil).decode(t, &shown)
	if shown.Live {
		t.Fatal("a dry run applied the policy")
	}
}

func TestReviewExplain(t *testing.T) {
	e := setup(t)
	r := e.call(t, "POST", "/v1/reviews?explain=1", "agent", reviewBody(contracts.Run{ID: "x", Agent: "billing-bot"},
		toolCall{ID: "a", Name: "shell.exec"}, toolCall{ID: "b", Name: "unknown.tool"}))
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var ans struct {
		Results []struct {
			Verdict string `json:"verdict"`
			Explain *struct {
				Action string `json:"action"`
				Rule   string `json:"rule"`
				Steps  []struct {
					Rule    string `json:"rule"`
					Matched bool   `json:"matched"`
					Why     string `json:"why"`
				} `json:"steps"`
			} `json:"explain"`
		} `json:"results"`
	}
	r.decode(t, &ans)
	shell := ans.Results[0].Explain
	if shell == nil || shell.Action != "deny" || shell.Rule != "no-shell" {
		t.Fatalf("shell.exec explain: %s", r.body)
	}
	matched := ""
	for _, s := range shell.Steps {
		if s.Why == "" {
			t.Errorf("step %+v has no reason", s)
		}
		if s.Matched {
			matched = s.Rule
		}
	}
	if matched != "no-shell" {
		t.Fatalf("steps %+v, want no-shell as the matching rule", shell.Steps)
	}
	if u := ans.Results[1].Explain; u == nil || u.Action != "require_approval" || u.Rule != "default" {
		t.Fatalf("unknown tool explain: %s", r.body)
	}
	// Without ?explain there is none.
	r = e.call(t, "POST", "/v1/reviews", "agent", reviewBody(contracts.Run{ID: "x", Agent: "billing-bot"}, toolCall{ID: "a", Name: "shell.exec"}))
	if strings.Contains(string(r.body), `"explain"`) {
		t.Fatalf("explain without asking: %s", r.body)
	}
	e.call(t, "POST", "/v1/reviews?explain=maybe", "agent", reviewBody(contracts.Run{ID: "x", Agent: "billing-bot"}, toolCall{ID: "a", Name: "shell.exec"})).
		wantError(t, http.StatusBadRequest, "invalid_parameter", "explain")
}
