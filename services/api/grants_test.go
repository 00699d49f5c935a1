package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/api/oversight"
)

const grantsPolicy = `
version: "grants-api-1"
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob]
    grants: {scopes: [call, run, agent], max_ttl: 8h, arguments: condition}
`

type grantResult struct {
	result
	GrantID string `json:"grant_id"`
}

func (e *env) reviewGrant(t *testing.T, run contracts.Run, id, args string) grantResult {
	t.Helper()
	r := e.call(t, "POST", "/v1/reviews", "agent", reviewBody(run, toolCall{ID: id, Name: "payments.send", Arguments: json.RawMessage(args)}))
	if r.status != http.StatusOK {
		t.Fatalf("review: %d %s", r.status, r.body)
	}
	var ans struct {
		Results []grantResult `json:"results"`
	}
	r.decode(t, &ans)
	return ans.Results[0]
}

func TestGrantsOverHTTP(t *testing.T) {
	e := setup(t)
	if r := e.call(t, "POST", "/v1/policy", "admin", grantsPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
	run := contracts.Run{ID: "run-h", Agent: "billing-bot", Tenant: "acme"}
	first := e.reviewGrant(t, run, "c1", `{"amount": 30}`)
	if first.Verdict != orchestrator.VerdictPending {
		t.Fatalf("first: %+v", first)
	}
	// Beyond the rule: refused at the door with the reason and the field.
	r := e.vote(t, "alice", first.EventID, map[string]any{"decision": "approve",
		"grant": map[string]any{"scope": "agent", "ttl": "24h", "arguments": "same"}})
	r.wantError(t, http.StatusForbidden, "grant_not_allowed", "grant/ttl")
	r = e.vote(t, "alice", first.EventID, map[string]any{"decision": "approve",
		"grant": map[string]any{"scope": "agent", "ttl": "2h", "arguments": "condition", "condition": "args.amount <"}})
	r.wantError(t, http.StatusForbidden, "grant_not_allowed", "grant/condition")

	// Within the rule: the approval counts, and the grant is issued.
	r = e.vote(t, "alice", first.EventID, map[string]any{"decision": "approve",
		"grant": map[string]any{"scope": "agent", "ttl": "2h", "arguments": "condition", "condition": "args.amount <= 50"}})
	if r.status != http.StatusOK {
		t.Fatalf("approve with a grant: %d %s", r.status, r.body)
	}
	// The arbiter writes the grant right after the record.
	awaitGrant(t, e.cfg.Gate, first.EventID)
	var g api.GrantView
	e.call(t, "GET", "/v1/grants/"+first.EventID, "alice", nil).decode(t, &g)
	if g.Status != contracts.GrantActive || g.Scope != "agent" || g.Condition != "args.amount <= 50" || g.GrantedBy[0] != "alice" {
		t.Fatalf("grant = %+v", g)
	}

	second := e.reviewGrant(t, contracts.Run{ID: "run-other", Agent: "billing-bot", Tenant: "acme"}, "c2", `{"amount": 12}`)
	if second.Verdict != orchestrator.VerdictAllowed || second.GrantID != first.EventID {
		t.Fatalf("a call the grant covers: %+v", second)
	}
	if big := e.reviewGrant(t, run, "c3", `{"amount": 51}`); big.Verdict != orchestrator.VerdictPending {
		t.Fatalf("a call outside the condition: %+v", big)
	}

	var list struct {
		Grants []api.GrantView `json:"grants"`
	}
	e.call(t, "GET", "/v1/grants?status=active", "alice", nil).decode(t, &list)
	if len(list.Grants) != 1 || list.Grants[0].GrantID != first.EventID {
		t.Fatalf("active grants = %+v", list.Grants)
	}
	e.call(t, "GET", "/v1/grants?status=bogus", "alice", nil).wantError(t, http.StatusBadRequest, "invalid_parameter", "status")
	// approver-1 is no approver of the issuing request: may not revoke.
	e.call(t, "POST", "/v1/grants/"+first.EventID+"/revoke", "approver-1", nil).wantError(t, http.StatusNotFound, "unknown_grant", "")
	e.call(t, "POST", "/v1/grants/nope/revoke", "bob", nil).wantError(t, http.StatusNotFound, "unknown_grant", "")

	r = e.call(t, "POST", "/v1/grants/"+first.EventID+"/revoke", "bob", nil)
	if r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	r.decode(t, &g)
	if g.Status != contracts.GrantRevoked || g.Revoked.By != "bob" {
		t.Fatalf("revoked grant = %+v", g)
	}
	if after := e.reviewGrant(t, contracts.Run{ID: "run-3", Agent: "billing-bot", Tenant: "acme"}, "c4", `{"amount": 12}`); after.Verdict != orchestrator.VerdictPending {
		t.Fatalf("a call after the revocation: %+v", after)
	}

	// The revocation answers once the grant is revoked; its timeline event
	// is stored right after.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.waitStored(ctx, t, contracts.GrantRevokedSubject(first.EventID))
	var tl api.Timeline
	e.call(t, "GET", "/v1/grants/"+first.EventID+"/events", "alice", nil).decode(t, &tl)
	var kinds []string
	for _, ev := range tl.Events {
		kinds = append(kinds, ev.Kind)
	}
	if len(kinds) != 3 || kinds[0] != "grant_issued" || kinds[1] != "grant_used" || kinds[2] != "grant_revoked" {
		t.Fatalf("grant timeline kinds = %v", kinds)
	}
	var used contracts.GrantEvent
	if err := json.Unmarshal(tl.Events[1].Data, &used); err != nil || used.ToolCallID != "c2" || used.RunID != "run-other" {
		t.Fatalf("use = %+v (%v)", used, err)
	}

	// The oversight view counts the grant, for its rule and for alice who
	// granted it, with the one call it allowed.
	var rep oversight.Report
	e.call(t, "GET", "/v1/oversight", "admin", nil).decode(t, &rep)
	if rep.Total.GrantsIssued != 1 || rep.Total.GrantUses != 1 {
		t.Fatalf("oversight total: %d grants (%d uses), want 1 (1)", rep.Total.GrantsIssued, rep.Total.GrantUses)
	}
	for _, a := range rep.Approvers {
		if a.Approver == "alice" && (a.GrantsIssued != 1 || a.GrantUses != 1) {
			t.Fatalf("oversight for alice: %d grants (%d uses), want 1 (1)", a.GrantsIssued, a.GrantUses)
		}
	}
}

// TestPolicyApplyListsStoppedGrants: a dry run and an apply name the active
// grants the new version no longer permits; a version that still permits
// them names none.
func TestPolicyApplyListsStoppedGrants(t *testing.T) {
	e := setup(t)
	if r := e.call(t, "POST", "/v1/policy", "admin", grantsPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
	run := contracts.Run{ID: "run-s", Agent: "billing-bot"}
	first := e.reviewGrant(t, run, "c1", `{"amount": 30}`)
	r := e.vote(t, "alice", first.EventID, map[string]any{"decision": "approve",
		"grant": map[string]any{"scope": "agent", "ttl": "2h", "arguments": "same"}})
	if r.status != http.StatusOK {
		t.Fatalf("approve with a grant: %d %s", r.status, r.body)
	}
	// The arbiter writes the grant right after the record.
	awaitGrant(t, e.cfg.Gate, first.EventID)
	type answer struct {
		Version       string             `json:"version"`
		StoppedGrants []api.StoppedGrant `json:"stopped_grants"`
	}
	narrower := `
version: "grants-api-2"
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob]
    grants: {scopes: [call, run], max_ttl: 8h}
`
	var ans answer
	e.call(t, "POST", "/v1/policy?dry_run=1", "admin", narrower).decode(t, &ans)
	if len(ans.StoppedGrants) != 1 || ans.StoppedGrants[0].GrantID != first.EventID || ans.StoppedGrants[0].Reason != "no longer permitted" ||
		ans.StoppedGrants[0].Rule != "payments" || ans.StoppedGrants[0].Tool != "payments.send" {
		t.Fatalf("dry run: %+v", ans)
	}
	renamed := `
version: "grants-api-3"
rules:
  - name: big-payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob]
    grants: {scopes: [call, run, agent], max_ttl: 8h}
`
	e.call(t, "POST", "/v1/policy?dry_run=1", "admin", renamed).decode(t, &ans)
	if len(ans.StoppedGrants) != 1 || ans.StoppedGrants[0].Reason != "rule changed" || ans.StoppedGrants[0].NewRule != "big-payments" {
		t.Fatalf("dry run of a renamed rule: %+v", ans)
	}
	same := strings.Replace(grantsPolicy, "grants-api-1", "grants-api-4", 1)
	ans = answer{}
	e.call(t, "POST", "/v1/policy?dry_run=1", "admin", same).decode(t, &ans)
	if len(ans.StoppedGrants) != 0 {
		t.Fatalf("a version that still permits the grant: %+v", ans)
	}
	ans = answer{}
	e.call(t, "POST", "/v1/policy", "admin", narrower).decode(t, &ans)
	if ans.Version != "grants-api-2" || len(ans.StoppedGrants) != 1 {
		t.Fatalf("apply: %+v", ans)
	}
	if v := e.reviewGrant(t, run, "c2", `{"amount": 30}`); v.Verdict != orchestrator.VerdictPending {
		t.Fatalf("a call the stopped grant covered: %+v", v)
	}
	// A later version that stops it too does not name it again: the apply
	// of grants-api-2 did.
	ans = answer{}
	e.call(t, "POST", "/v1/policy", "admin", strings.Replace(narrower, "grants-api-2", "grants-api-5", 1)).decode(t, &ans)
	if ans.Version != "grants-api-5" || len(ans.StoppedGrants) != 0 {
		t.Fatalf("an apply after the grant was stopped names it again: %+v", ans)
	}
}

// awaitGrant waits until gate's grant book holds grant id: the arbiter
// has written it, and a call through that gate is judged with it.
func awaitGrant(t *testing.T, gate *orchestrator.Gate, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.Grants().Await(ctx, id); err != nil {
		t.Fatalf("grant %s never reached the gate's book: %v", id, err)
	}
}
