package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// replayCandidate allows small payments, which the test policy gates.
const replayCandidate = `
version: "t2"
default: require_approval
rules:
  - name: small-payments
    tools: ["payments.*"]
    when: 'args.amount < 100'
    action: allow
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob]
    quorum: 2
`

// replayLines posts a replay and reads its NDJSON answer.
func (e *env) replayLines(t *testing.T, token, query, candidate string) (status int, progress int, report *api.ReplayAnswer, errLine json.RawMessage) {
	t.Helper()
	r := e.call(t, "POST", "/v1/policy/replay"+query, token, candidate)
	if r.status != http.StatusOK {
		return r.status, 0, nil, r.body
	}
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		var line struct {
			Progress *api.ReplayProgress `json:"progress"`
			Report   *api.ReplayAnswer   `json:"report"`
			Error    json.RawMessage     `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		switch {
		case line.Progress != nil:
			progress++
		case line.Report != nil:
			report = line.Report
		case line.Error != nil:
			errLine = line.Error
		}
	}
	return r.status, progress, report, errLine
}

// TestPolicyReplayRoute: POST /v1/policy/replay streams progress, then a
// report per rule of the candidate of what would change for the recorded
// requests; an auditor of one tenant gets the others' requests counted
// but not shown; agents and approvers may not replay; a bad candidate or
// window is refused before anything is read.
func TestPolicyReplayRoute(t *testing.T) {
	e := setup(t)
	acme := contracts.Run{ID: "r-acme", Agent: "billing-bot", Tenant: "acme"}
	globex := contracts.Run{ID: "r-globex", Agent: "billing-bot", Tenant: "globex"}
	e.review(t, "", acme, toolCall{ID: "a1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)},
		toolCall{ID: "a2", Name: "payments.send", Arguments: json.RawMessage(`{"amount":500}`)})
	e.review(t, "", globex, toolCall{ID: "g1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":7}`)},
		toolCall{ID: "s1", Name: "search_web", Arguments: json.RawMessage(`{}`)})

	status, progress, rep, _ := e.replayLines(t, "admin", "?since=1h", replayCandidate)
	if status != http.StatusOK || rep == nil || progress == 0 {
		t.Fatalf("admin: status %d, %d progress lines, report %v", status, progress, rep)
	}
	if rep.Requests != 3 || rep.Changed != 3 || rep.Candidate != "t2" || !strings.Contains(rep.Sees, "allowed or denied outright") {
		t.Errorf("report %+v", rep)
	}
	changes := map[string]int{}
	shown := map[string]int{}
	for _, r := range rep.Rules {
		for _, c := range r.Changes {
			changes[r.Rule+" "+c.Field+" "+c.From+"→"+c.To] = c.Count
			shown[r.Rule+" "+c.Field] += len(c.Examples)
		}
	}
	want := map[string]int{
		"small-payments action require_approval→allow": 2,
		"payments quorum 1→2":                          1,
		"payments approvers alice→alice,bob":           1,
	}
	for k, n := range want {
		if changes[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, changes[k], n, changes)
		}
	}
	if shown["small-payments action"] != 2 {
		t.Errorf("admin sees %d examples of small-payments, want 2", shown["small-payments action"])
	}

	// An auditor of acme: globex's request is counted, never shown.
	tok, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	aud := *e
	aud.url = e.replica(t, func(c *api.Config) {
		c.Tokens = append(c.Tokens, api.Token{Name: "aud", Subject: "audrey", SHA256: hash, Roles: []string{api.RoleAuditor}, Tenants: []string{"acme"}})
	})
	_, _, rep, _ = aud.replayLines(t, tok, "?since=1h", replayCandidate)
	if rep == nil {
		t.Fatal("auditor: no report")
	}
	for _, r := range rep.Rules {
		for _, c := range r.Changes {
			if r.Rule == "small-payments" && (c.Count != 2 || c.Hidden != 1 || len(c.Examples) != 1 || c.Examples[0].Tenant != "acme") {
				t.Errorf("auditor of acme: %+v", c)
			}
		}
	}

	for _, tc := range []struct {
		token, query, body, code string
		status                   int
	}{
		{"agent", "", replayCandidate, api.CodeForbidden, http.StatusForbidden},
		{"alice", "", replayCandidate, api.CodeForbidden, http.StatusForbidden},
		{"admin", "", "rules: [", api.CodeInvalidPolicy, http.StatusBadRequest},
		{"admin", "?since=yesterday", replayCandidate, api.CodeInvalidParameter, http.StatusBadRequest},
		{"admin", "?since=1h&until=2h", replayCandidate, api.CodeInvalidParameter, http.StatusBadRequest},
	} {
		r := e.call(t, "POST", "/v1/policy/replay"+tc.query, tc.token, tc.body)
		if r.status != tc.status || !strings.Contains(string(r.body), `"`+tc.code+`"`) {
			t.Errorf("%s %s: %d %s, want %d %s", tc.token, tc.query, r.status, r.body, tc.status, tc.code)
		}
	}
}

// TestReviewShowsShadowVerdicts: a review's result says what the live
// policy's shadow rules would have decided, the request records it, and
// ?explain=1 shows the shadow rule's step; the verdict is the enforced one.
func TestReviewShowsShadowVerdicts(t *testing.T) {
	e := setup(t)
	shadowed := strings.Replace(testPolicy, `version: "t1"`, `version: "t1-shadow"`, 1) + `
  - name: deny-searches
    mode: shadow
    tools: ["search_*"]
    action: deny
`
	shadowed = strings.Replace(shadowed, "rules:\n", "rules:\n  - {name: gate-all, mode: shadow, tools: [\"*\"], action: require_approval, risk: critical}\n", 1)
	if r := e.call(t, "POST", "/v1/policy", "admin", shadowed); r.status != http.StatusOK {
		t.Fatalf("apply: %d %s", r.status, r.body)
	}
	r := e.call(t, "POST", "/v1/reviews?explain=1", "agent", reviewBody(contracts.Run{ID: "r1", Agent: "bot"},
		toolCall{ID: "c1", Name: "search_web"}, toolCall{ID: "c2", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}))
	var ans struct {
		Results []struct {
			Verdict string                    `json:"verdict"`
			EventID string                    `json:"event_id"`
			Shadow  []contracts.ShadowVerdict `json:"shadow"`
			Explain struct {
				Steps []struct {
					Rule   string `json:"rule"`
					Shadow bool   `json:"shadow"`
					Why    string `json:"why"`
				} `json:"steps"`
			} `json:"explain"`
		} `json:"results"`
	}
	r.decode(t, &ans)
	search, pay := ans.Results[0], ans.Results[1]
	if search.Verdict != "allowed" || len(search.Shadow) != 1 || search.Shadow[0].Rule != "gate-all" || search.Shadow[0].Risk != "critical" {
		t.Errorf("search: %+v", search)
	}
	if len(search.Explain.Steps) < 2 || !search.Explain.Steps[0].Shadow || search.Explain.Steps[len(search.Explain.Steps)-1].Rule != "reads" {
		t.Errorf("search explain: %+v", search.Explain.Steps)
	}
	if pay.Verdict != "pending" || len(pay.Shadow) != 1 || pay.Shadow[0].Action != "require_approval" {
		t.Errorf("payment: %+v", pay)
	}
	rec := e.call(t, "GET", "/v1/approvals/"+pay.EventID, "admin", nil)
	var got recordAnswer
	rec.decode(t, &got)
	if s := got.Record.Request.Shadow; len(s) != 1 || s[0].Rule != "gate-all" {
		t.Errorf("the request records shadow %+v", s)
	}
}
