package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// tenantPolicy gates refunds for alice (of acme) and gina (of globex), and
// marks the customer's SSN as sensitive; reports go to any approver.
const tenantPolicy = `version: "tenants-1"
default: require_approval
rules:
  - name: refunds
    tools: ["billing.refund"]
    action: require_approval
    approvers: [alice, gina]
    sensitive: ["/ssn"]
  - name: reports
    tools: ["reports.*"]
    action: require_approval
`

// secretSSN is the sensitive value; it must reach no one who may not decide.
const secretSSN = "123-45-6789"

// tenants adds the two tenants' tokens to e and serves them on a replica
// the test then talks to.
func (e *env) tenants(t *testing.T) {
	t.Helper()
	add := func(name, subject string, tenants []string, agents []string, roles ...string) {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[name] = tok
		e.cfg.Tokens = append(e.cfg.Tokens, api.Token{Name: name, Subject: subject, SHA256: hash, Roles: roles, Tenants: tenants, Agents: agents})
	}
	add("agent-acme", "agent:acme", []string{"acme"}, nil, api.RoleAgent)
	add("agent-globex", "agent:globex", []string{"globex"}, nil, api.RoleAgent)
	add("alice-acme", "alice", []string{"acme"}, nil, api.RoleApprover)
	add("gina-globex", "gina", []string{"globex"}, nil, api.RoleApprover)
	add("auditor-acme", "audit:acme", []string{"acme"}, nil, api.RoleAuditor)
	add("auditor-globex", "audit:globex", []string{"globex"}, nil, api.RoleAuditor)
	add("viewer-support", "view:support", nil, []string{"support-*"}, api.RoleViewer)
	e.url = e.replica(t, nil)
	if r := e.call(t, "POST", "/v1/policy", "admin", tenantPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
}

// submit reviews one call as token and returns its pending event id.
func (e *env) submit(t *testing.T, token, tenant, agent, tool string, args string) string {
	t.Helper()
	res := e.reviewAs(t, token, contracts.Run{ID: "run-" + tool, Agent: agent, Tenant: tenant}, toolCall{ID: "c1", Name: tool, Arguments: json.RawMessage(args)})
	if res.status != http.StatusOK {
		t.Fatalf("review as %s: %d %s", token, res.status, res.body)
	}
	var ans struct {
		Results []result `json:"results"`
	}
	res.decode(t, &ans)
	if len(ans.Results) != 1 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review as %s: %s", token, res.body)
	}
	return ans.Results[0].EventID
}

func (e *env) reviewAs(t *testing.T, token string, run contracts.Run, calls ...toolCall) response {
	t.Helper()
	return e.call(t, "POST", "/v1/reviews", token, reviewBody(run, calls...))
}

// Each kind of caller reads exactly the requests it may decide or audit:
// the rest answer 404 on every read, are missing from every listing, and
// the sensitive value is shown only to those who may decide.
func TestReadsAreScopedToWhoMayDecideOrAudit(t *testing.T) {
	e := setup(t)
	e.tenants(t)
	id := e.submit(t, "agent-acme", "acme", "billing-bot", "billing.refund", `{"amount":5,"ssn":"`+secretSSN+`"}`)
	cases := []struct {
		token      string
		read, sees bool
	}{
		{"alice-acme", true, true},       // an approver it names, of its tenant
		{"agent-acme", true, true},       // the agent token that submitted it
		{"admin", true, true},            // admin sees everything
		{"auditor-acme", true, false},    // an auditor of its tenant: values masked
		{"approver-0", false, false},     // an approver it does not name
		{"gina-globex", false, false},    // named by the policy, but of another tenant
		{"agent-globex", false, false},   // an agent token of another tenant
		{"auditor-globex", false, false}, // an auditor of another tenant
		{"viewer-support", false, false}, // a viewer of other agents
		{"agent", false, false},          // an agent token that did not submit it
	}
	for _, c := range cases {
		t.Run(c.token, func(t *testing.T) {
			get := e.call(t, "GET", "/v1/approvals/"+id, c.token, nil)
			list := e.call(t, "GET", "/v1/approvals?limit=500", c.token, nil)
			timeline := e.call(t, "GET", "/v1/approvals/"+id+"/events", c.token, nil)
			if !c.read {
				get.wantError(t, http.StatusNotFound, "unknown_event", "")
				timeline.wantError(t, http.StatusNotFound, "unknown_event", "")
				if list.status != http.StatusOK || strings.Contains(string(list.body), id) {
					t.Fatalf("listing of %s: %d, mentions the request: %v", c.token, list.status, strings.Contains(string(list.body), id))
				}
				return
			}
			for what, r := range map[string]response{"get": get, "list": list, "timeline": timeline} {
				if r.status != http.StatusOK || !strings.Contains(string(r.body), id) {
					t.Fatalf("%s as %s: %d %s", what, c.token, r.status, r.body)
				}
				if got := strings.Contains(string(r.body), secretSSN); got != c.sees {
					t.Fatalf("%s as %s shows the SSN: %v, want %v: %s", what, c.token, got, c.sees, r.body)
				}
				if !c.sees && !strings.Contains(string(r.body), `"ssn":"••••"`) {
					t.Fatalf("%s as %s does not show the SSN masked: %s", what, c.token, r.body)
				}
			}
		})
	}
}

// An agent token submits only for its tenants: a review for another is
// refused, one without a tenant is for its only tenant.
func TestAgentTokenSubmitsOnlyForItsTenants(t *testing.T) {
	e := setup(t)
	e.tenants(t)
	r := e.reviewAs(t, "agent-globex", contracts.Run{ID: "r1", Agent: "billing-bot", Tenant: "acme"}, toolCall{ID: "c1", Name: "billing.refund", Arguments: json.RawMessage(`{"amount":1}`)})
	r.wantError(t, http.StatusForbidden, "forbidden", "run.tenant")
	id := e.submit(t, "agent-globex", "", "billing-bot", "billing.refund", `{"amount":1}`)
	if rec := e.recordAs(t, "gina-globex", id); rec.Request.Run.Tenant != "globex" || rec.Request.Submitter != "agent:globex" {
		t.Fatalf("tenant %q, submitter %q; want globex and agent:globex", rec.Request.Run.Tenant, rec.Request.Submitter)
	}
}

// A vote on a request the approver may not read is answered as for a
// request that does not exist, and changes nothing; the approver it names
// decides it.
func TestVotesOnUnreadableRequestsAreNotFound(t *testing.T) {
	e := setup(t)
	e.tenants(t)
	id := e.submit(t, "agent-acme", "acme", "billing-bot", "billing.refund", `{"amount":5,"ssn":"`+secretSSN+`"}`)
	for _, who := range []string{"gina-globex", "approver-0"} {
		e.vote(t, who, id, map[string]any{"decision": "approve"}).wantError(t, http.StatusNotFound, "unknown_event", "")
	}
	if rec := e.recordAs(t, "alice-acme", id); len(rec.Votes)+len(rec.RefusedVotes) != 0 {
		t.Fatalf("votes %v, refused %v; want none", rec.Votes, rec.RefusedVotes)
	}
	if r := e.vote(t, "alice-acme", id, map[string]any{"decision": "approve"}); r.status != http.StatusOK {
		t.Fatalf("alice's vote: %d %s", r.status, r.body)
	}
}

// Reading a request with sensitive arguments, and exporting its timeline,
// are recorded in its timeline: who, what and via which surface.
func TestSensitiveReadsAndExportsAreAudited(t *testing.T) {
	e := setup(t)
	e.tenants(t)
	id := e.submit(t, "agent-acme", "acme", "billing-bot", "billing.refund", `{"amount":5,"ssn":"`+secretSSN+`"}`)
	if r := e.call(t, "GET", "/v1/approvals/"+id, "auditor-acme", nil); r.status != http.StatusOK {
		t.Fatalf("get: %d", r.status)
	}
	if r := e.call(t, "GET", "/v1/approvals/"+id+"/events", "auditor-acme", nil); r.status != http.StatusOK {
		t.Fatalf("export: %d", r.status)
	}
	var tl api.Timeline
	e.call(t, "GET", "/v1/approvals/"+id+"/events", "alice-acme", nil).decode(t, &tl)
	var reads []contracts.Read
	for _, ev := range tl.Events {
		if ev.Kind == api.KindRead {
			var rd contracts.Read
			if err := json.Unmarshal(ev.Data, &rd); err != nil {
				t.Fatal(err)
			}
			reads = append(reads, rd)
		}
	}
	want := map[string]bool{"audit:acme record api": false, "audit:acme export api": false}
	for _, rd := range reads {
		want[rd.Reader+" "+rd.What+" "+rd.Surface] = true
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("no read %q in the timeline; reads: %+v", k, reads)
		}
	}
}

// The live feed sends a client only the requests it may read: approver-0,
// an approver that may decide reports but not refunds, gets the report's
// event and never the refund's (which came first on the same ordered feed); the auditor of
// acme gets the refund with the SSN masked.
func TestEventStreamSendsOnlyReadableRequests(t *testing.T) {
	e := setup(t)
	e.tenants(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob := e.openEvents(t, ctx, "approver-0")
	auditor := e.openEvents(t, ctx, "auditor-acme")
	alice := e.openEvents(t, ctx, "alice-acme")
	refund := e.submit(t, "agent-acme", "acme", "billing-bot", "billing.refund", `{"amount":5,"ssn":"`+secretSSN+`"}`)
	report := e.submit(t, "agent", "", "reporter", "reports.weekly", `{"week":3}`)
	if ev := bob("requested"); !strings.Contains(ev.data, report) {
		t.Fatalf("bob's first event is not the report: %+v", ev)
	}
	ev := auditor("requested")
	if !strings.Contains(ev.data, refund) || strings.Contains(ev.data, secretSSN) || !strings.Contains(ev.data, "••••") {
		t.Fatalf("the auditor's event: %+v", ev)
	}
	if ev := alice("requested"); !strings.Contains(ev.data, secretSSN) {
		t.Fatalf("alice, who decides it, does not see the SSN: %+v", ev)
	}
}

// recordAs reads approval id as the named token.
func (e *env) recordAs(t *testing.T, token, id string) contracts.Record {
	t.Helper()
	var ans recordAnswer
	r := e.call(t, "GET", "/v1/approvals/"+id, token, nil)
	if r.status != http.StatusOK {
		t.Fatalf("get %s as %s: %d %s", id, token, r.status, r.body)
	}
	r.decode(t, &ans)
	return ans.Record
}
