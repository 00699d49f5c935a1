package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// financePolicy gates payments on the directory's finance group, which the
// policy itself does not define.
const financePolicy = `
version: "id1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: ["group:finance"]
`

// dirSource is a directory source a test can switch, as a reload does.
type dirSource struct {
	p atomic.Pointer[directory.Directory]
}

func (s *dirSource) Current() *directory.Directory { return s.p.Load() }

// setupDirectory serves the API with tokens from a directory: alice and bob
// in finance, carol in treasury, and a config token for the agent. It
// returns the env (tokens by user name) and a function that replaces the
// directory with the users given (each keeps the token it had).
func setupDirectory(t *testing.T) (*env, func(users ...string)) {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	// One registry for the arbiter and the API, as serve has.
	reg := prometheus.NewRegistry()
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Registerer: reg, UnknownEventDelay: 20 * time.Millisecond, UnknownEventAttempts: 3})

	e := &env{js: js, tokens: map[string]string{}}
	entries := map[string]string{}
	for _, u := range []struct{ id, group, role string }{
		{"alice", "finance", "approver"}, {"bob", "finance", "approver"},
		{"carol", "treasury", "approver, viewer"}, {"dana", "finance", "agent"},
	} {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[u.id] = tok
		entries[u.id] = fmt.Sprintf("  - id: %s\n    email: %s@example.com\n    groups: [%s]\n    tokens: [{sha256: %s, roles: [%s]}]\n", u.id, u.id, u.group, hash, u.role)
	}
	dir := &dirSource{}
	use := func(users ...string) {
		var b strings.Builder
		b.WriteString("users:\n")
		for _, u := range users {
			b.WriteString(entries[u])
		}
		d, err := directory.Parse([]byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		dir.p.Store(d)
	}
	use("alice", "bob", "carol", "dana")

	p, err := policy.Parse([]byte(financePolicy))
	if err != nil {
		t.Fatal(err)
	}
	countersigntest.Trust(t, p) // the gate serves it from memory
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: apiJS, Policy: orchestrator.StaticPolicy{P: p}, Directory: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	agentTok, agentHash, _ := api.NewToken()
	e.tokens["agent"] = agentTok
	adminTok, adminHash, _ := api.NewToken()
	e.tokens["admin"] = adminTok
	s, err := api.New(ctx, api.Config{
		JS: apiJS, Gate: gate, Directory: dir, Registerer: reg, Gatherer: reg,
		Tokens: []api.Token{
			{Name: "agent", Subject: "agent:billing", SHA256: agentHash, Roles: []string{api.RoleAgent}},
			{Name: "admin", Subject: "ops", SHA256: adminHash, Roles: []string{api.RoleAdmin}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	if e.kv, err = js.KeyValue(ctx, contracts.BucketApprovals); err != nil {
		t.Fatal(err)
	}
	return e, use
}

// metric returns the value of one sample on /metrics ("" when absent).
func (e *env) metric(t *testing.T, sample string) string {
	t.Helper()
	r := e.call(t, "GET", "/metrics", "admin", nil)
	for line := range strings.Lines(string(r.body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			return v
		}
	}
	return ""
}

func TestDirectoryTokensVoteAsTheirUser(t *testing.T) {
	e, _ := setupDirectory(t)
	id := e.pendingApproval(t, "run-dir-1", "payments.send")
	var rec recordAnswer
	e.call(t, "GET", "/v1/approvals/"+id, "alice", nil).decode(t, &rec)
	if got := rec.Record.Request.Quorum.Approvers; len(got) != 3 || got[0] != "alice" || got[1] != "bob" || got[2] != "dana" {
		t.Fatalf("frozen approvers %v, want the finance group's members", got)
	}
	ans := e.approve(t, "alice", id)
	if ans.Record.Status != contracts.StatusApproved || ans.Record.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaAPI}) {
		t.Fatalf("record after alice's vote: %+v", ans.Record)
	}
	// A member whose token lacks the approver role cannot vote.
	other := e.pendingApproval(t, "run-dir-2", "payments.send")
	e.vote(t, "dana", other, map[string]any{"decision": "approve"}).wantError(t, http.StatusForbidden, "forbidden", "")
}

func TestForgedIdentityIsRefusedAndCounted(t *testing.T) {
	e, _ := setupDirectory(t)
	id := e.pendingApproval(t, "run-forged", "payments.send")

	// Carol is in the directory, but not in finance (she reads every request
	// as a viewer, so her vote reaches the arbiter): the arbiter refuses
	// her vote as not_an_approver, and the API counts it.
	e.vote(t, "carol", id, map[string]any{"decision": "approve"}).wantError(t, http.StatusForbidden, contracts.ReasonNotAnApprover, "")
	if got := e.metric(t, `countersign_api_votes_total{result="not_an_approver"}`); got != "1" {
		t.Fatalf("not_an_approver votes counted by the API: %q, want 1", got)
	}
	// The arbiter counts a refusal before it announces it: wait for the
	// vote_refused change event, then read the counter.
	waitChange(t, e, id, contracts.ChangeVoteRefused)
	if got := e.metric(t, `countersign_refused_votes_total{reason="not_an_approver"}`); got != "1" {
		t.Fatalf("not_an_approver votes counted by the arbiter: %q, want 1", got)
	}

	// Carol claims to be alice in the body: refused before it reaches the bus.
	e.vote(t, "carol", id, map[string]any{"decision": "approve", "approver": map[string]string{"id": "alice", "via": "api"}}).
		wantError(t, http.StatusBadRequest, api.CodeApproverNotAllowed, "approver")
	e.vote(t, "carol", id, map[string]any{"decision": "approve", "approver": "alice"}).
		wantError(t, http.StatusBadRequest, api.CodeApproverNotAllowed, "approver")
	if got := e.metric(t, `countersign_api_votes_total{result="approver_not_allowed"}`); got != "2" {
		t.Fatalf("forged-body votes counted: %q, want 2", got)
	}

	// An unknown token, and a token hash presented as the token, authenticate nobody.
	e.vote(t, "cs_not-a-token", id, map[string]any{"decision": "approve"}).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")
	e.vote(t, api.HashToken(e.tokens["alice"]), id, map[string]any{"decision": "approve"}).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")

	// Nothing counted for alice; the one refusal on record is carol's.
	var rec recordAnswer
	e.call(t, "GET", "/v1/approvals/"+id, "alice", nil).decode(t, &rec)
	if rec.Record.Status != contracts.StatusPending || len(rec.Record.Votes) != 0 ||
		len(rec.Record.RefusedVotes) != 1 || rec.Record.RefusedVotes[0].Approver.ID != "carol" {
		t.Fatalf("record after the forgeries: status %s votes %+v refused %+v", rec.Record.Status, rec.Record.Votes, rec.Record.RefusedVotes)
	}
}

func TestDirectoryReloadRevokesAndGrants(t *testing.T) {
	e, use := setupDirectory(t)
	id := e.pendingApproval(t, "run-reload", "payments.send")
	// Bob leaves the directory: his token no longer authenticates.
	use("alice", "carol", "dana")
	e.vote(t, "bob", id, map[string]any{"decision": "approve"}).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")
	// He comes back: the token works again, and the request's frozen
	// approver list still names him.
	use("alice", "bob", "carol", "dana")
	if ans := e.approve(t, "bob", id); ans.Record.Status != contracts.StatusApproved {
		t.Fatalf("status %s", ans.Record.Status)
	}
}

// waitChange blocks until a hitl.approval.changed event of kind change is
// stored for id; an ordered consumer's pull is answered as soon as one is.
func waitChange(t *testing.T, e *env, id, change string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.ChangedSubject(id)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("no %s change for %s: %v", change, id, err)
		}
		var ch contracts.Changed
		if err := json.Unmarshal(m.Data(), &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Change == change {
			return
		}
	}
}

// The API knows its approver directory: a policy naming a group the
// directory defines is not warned about; one naming a group nobody defines
// is, and GET /v1/policy names the directory's groups for policy lint.
func TestPolicyWarningsKnowTheDirectorysGroups(t *testing.T) {
	e, _ := setupDirectory(t)
	src := `version: "groups-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: ["group:finance", "group:legal"]
`
	r := e.call(t, "POST", "/v1/policy?dry_run=1", "admin", src)
	if r.status != http.StatusOK {
		t.Fatalf("dry run: %d %s", r.status, r.body)
	}
	var ans struct {
		Warnings []policy.Problem `json:"warnings"`
	}
	r.decode(t, &ans)
	if len(ans.Warnings) != 1 || ans.Warnings[0].Group != "legal" || !strings.Contains(ans.Warnings[0].Message, `unknown approver group "legal"`) {
		t.Fatalf("warnings %+v, want only the one about legal", ans.Warnings)
	}
	var info struct {
		DirectoryGroups []string `json:"directory_groups"`
	}
	e.call(t, "GET", "/v1/policy", "alice", nil).decode(t, &info)
	if !slices.Equal(info.DirectoryGroups, []string{"finance", "treasury"}) {
		t.Fatalf("directory_groups %v, want [finance treasury]", info.DirectoryGroups)
	}
}
