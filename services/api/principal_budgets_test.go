package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
)

// withBudgets serves e's API on a replica with budgets b; e talks to it
// from then on.
func (e *env) withBudgets(t *testing.T, b api.Budgets) {
	t.Helper()
	e.url = e.replica(t, func(c *api.Config) { c.Budgets = b })
}

// refusals reads countersign_budget_refusals_total{budget} from /metrics.
func (e *env) refusals(t *testing.T, budget string) float64 {
	t.Helper()
	r := e.call(t, "GET", "/metrics", "admin", nil)
	prefix := `countersign_budget_refusals_total{budget="` + budget + `"} `
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// wantOverBudget checks a 429 answer: the code, and a Retry-After of whole
// seconds, at least 1.
func (r response) wantOverBudget(t *testing.T, code string) int {
	t.Helper()
	r.wantError(t, http.StatusTooManyRequests, code, "")
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
	}
	return n
}

// A principal that creates requests faster than its review rate is
// answered 429 rate_limited with Retry-After once its burst is spent;
// nothing is published for the refused review, and another principal's
// reviews and votes go on.
func TestReviewRateBudget(t *testing.T) {
	e := setup(t)
	e.withBudgets(t, api.Budgets{ReviewRate: 0.01, ReviewBurst: 2})
	run := contracts.Run{ID: "run-rate", Agent: "billing-bot"}
	e.review(t, "", run, toolCall{ID: "a", Name: "deploy"})
	e.review(t, "", run, toolCall{ID: "b", Name: "deploy"})
	r := e.call(t, "POST", "/v1/reviews", "agent", reviewBody(run, toolCall{ID: "c", Name: "deploy"}))
	if n := r.wantOverBudget(t, api.CodeRateLimited); n < 60 {
		t.Errorf("Retry-After %d, want the time one request takes to refill at 0.01/s", n)
	}
	q := e.call(t, "POST", "/v1/questions", "agent", map[string]any{"run": run, "id": "q1", "question": map[string]any{"text": "go?"}})
	q.wantOverBudget(t, api.CodeRateLimited)
	if got := e.call(t, "GET", "/v1/approvals/"+orchestrator.EventID(run, "c"), "admin", nil); got.status != http.StatusNotFound {
		t.Fatalf("the refused review was published: %d %s", got.status, got.body)
	}
	// The admin is another principal, with a bucket of its own.
	res := e.call(t, "POST", "/v1/reviews", "admin", reviewBody(run, toolCall{ID: "d", Name: "deploy"}))
	if res.status != http.StatusOK {
		t.Fatalf("another principal's review: %d %s", res.status, res.body)
	}
	if got := e.refusals(t, api.BudgetReviewRate); got != 2 {
		t.Fatalf("review_rate refusals counted %v, want 2", got)
	}
}

// Votes have their own rate: each vote of a batch counts.
func TestVoteRateBudget(t *testing.T) {
	e := setup(t)
	e.withBudgets(t, api.Budgets{VoteRate: 0.01, VoteBurst: 3})
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = e.pendingApproval(t, fmt.Sprintf("run-votes-%d", i), "deploy")
	}
	e.approve(t, "bob", ids[0])
	batch := map[string]any{"votes": []map[string]any{
		{"event_id": ids[1], "decision": "approve"}, {"event_id": ids[2], "decision": "approve"},
	}}
	if r := e.call(t, "POST", "/v1/votes", "bob", batch); r.status != http.StatusOK {
		t.Fatalf("batch within the burst: %d %s", r.status, r.body)
	}
	e.vote(t, "bob", ids[0], map[string]any{"decision": "approve"}).wantOverBudget(t, api.CodeRateLimited)
	e.call(t, "POST", "/v1/votes", "bob", batch).wantOverBudget(t, api.CodeRateLimited)
	// alice's votes are hers to spend.
	other := e.pendingApproval(t, "run-votes-alice", "deploy")
	e.approve(t, "alice", other)
	if got := e.refusals(t, api.BudgetVoteRate); got != 2 {
		t.Fatalf("vote_rate refusals counted %v, want 2", got)
	}
}

// openStream opens GET /v1/events as token and returns the response (the
// caller closes its body) once the stream has started, or the refusal.
func (e *env) openStream(t *testing.T, ctx context.Context, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.tokens[token])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A principal holds at most streams_per_principal live event streams; one
// more is answered 429 too_many_streams, others open theirs, and a slot
// given back can be taken again.
func TestStreamsPerPrincipalBudget(t *testing.T) {
	e := setup(t)
	e.withBudgets(t, api.Budgets{StreamsPerPrincipal: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, firstCancel := context.WithCancel(ctx)
	var open []*http.Response
	for i := range 2 {
		c := ctx
		if i == 0 {
			c = first
		}
		resp := e.openStream(t, c, "alice")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
		defer resp.Body.Close()
		open = append(open, resp)
	}
	over := e.openStream(t, ctx, "alice")
	var ae apiErr
	_ = json.NewDecoder(over.Body).Decode(&ae)
	over.Body.Close()
	if over.StatusCode != http.StatusTooManyRequests || ae.Error.Code != api.CodeTooManyStreams || over.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %d %+v Retry-After %q", over.StatusCode, ae, over.Header.Get("Retry-After"))
	}
	if resp := e.openStream(t, ctx, "bob"); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's stream: %d", resp.StatusCode)
	} else {
		defer resp.Body.Close()
	}
	// Closing a stream gives its slot back once the server sees it end.
	firstCancel()
	open[0].Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := e.openStream(t, ctx, "alice")
		if resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the closed stream's slot was not given back")
		}
		time.Sleep(20 * time.Millisecond) // the server notices the closed connection on its own time
	}
	if got := e.refusals(t, api.BudgetStreams); got < 1 {
		t.Fatalf("streams refusals counted %v, want at least 1", got)
	}
}

// An agent's pending approvals are bounded: a review that would pass the
// quota is refused 429 pending_quota before anything is published; calls
// the policy allows or denies, and reviews that re-attach, still pass; a
// decided approval makes room again.
func TestPendingQuotaPerAgent(t *testing.T) {
	e := setup(t)
	e.withBudgets(t, api.Budgets{PendingPerAgent: 3})
	run := contracts.Run{ID: "run-quota", Agent: "billing-bot"}
	res := e.review(t, "", run, toolCall{ID: "a", Name: "deploy"}, toolCall{ID: "b", Name: "deploy"}, toolCall{ID: "c", Name: "deploy"})
	r := e.call(t, "POST", "/v1/reviews", "agent", reviewBody(run, toolCall{ID: "d", Name: "deploy"}))
	if n := r.wantOverBudget(t, api.CodePendingQuota); n < 1 {
		t.Fatal(n)
	}
	if got := e.call(t, "GET", "/v1/approvals/"+orchestrator.EventID(run, "d"), "admin", nil); got.status != http.StatusNotFound {
		t.Fatalf("the refused call was published: %d %s", got.status, got.body)
	}
	q := e.call(t, "POST", "/v1/questions", "agent", map[string]any{"run": run, "id": "q1", "question": map[string]any{"text": "go?"}})
	q.wantOverBudget(t, api.CodePendingQuota)
	// Allowed and denied calls create no approval; a re-attach none either.
	again := e.review(t, "", run, toolCall{ID: "a", Name: "deploy"}, toolCall{ID: "s", Name: "search_docs"}, toolCall{ID: "x", Name: "shell.exec"})
	if again[0].EventID != res[0].EventID || again[1].Verdict != "allowed" || again[2].Verdict != "denied" {
		t.Fatalf("re-attach and ungated calls: %+v", again)
	}
	e.approve(t, "bob", res[0].EventID)
	e.review(t, "", run, toolCall{ID: "d", Name: "deploy"})
	if got := e.refusals(t, api.BudgetPendingAgent); got != 2 {
		t.Fatalf("pending_per_agent refusals counted %v, want 2", got)
	}
}

// A tenant's pending approvals are bounded whoever submits them; another
// tenant is not affected.
func TestPendingQuotaPerTenant(t *testing.T) {
	e := setup(t)
	e.cfg.Budgets = api.Budgets{PendingPerTenant: 2}
	e.tenants(t)
	e.submit(t, "agent-acme", "acme", "billing-bot", "reports.a", `{}`)
	e.submit(t, "admin", "acme", "billing-bot", "reports.b", `{}`)
	r := e.reviewAs(t, "agent-acme", contracts.Run{ID: "run-c", Agent: "billing-bot", Tenant: "acme"}, toolCall{ID: "c1", Name: "reports.c"})
	r.wantOverBudget(t, api.CodePendingQuota)
	e.submit(t, "agent-globex", "globex", "billing-bot", "reports.a", `{}`)
	if got := e.refusals(t, api.BudgetPendingTenant); got != 1 {
		t.Fatalf("pending_per_tenant refusals counted %v, want 1", got)
	}
}

// A vote or command on another tenant's request is refused exactly as one
// on a request that does not exist: the same status, code and message, and
// no sooner (a missing request is waited for a while, in case its record
// is about to be made; an unreadable one is held as long).
func TestUnreadableRequestRefusedLikeAMissingOne(t *testing.T) {
	e := setup(t)
	e.tenants(t)
	theirs := e.submit(t, "agent-globex", "globex", "billing-bot", "reports.q3", `{}`)
	missing := orchestrator.EventID(contracts.Run{ID: "no-such-run", Agent: "billing-bot", Tenant: "globex"}, "c1")
	timed := func(method, path, token string, body any) (response, time.Duration) {
		start := time.Now()
		r := e.call(t, method, path, token, body)
		return r, time.Since(start)
	}
	for _, c := range []struct {
		name, token, suffix string
		body                any
	}{
		{"vote", "alice-acme", "/votes", map[string]any{"decision": "approve"}},
		{"cancel", "agent-acme", "/cancel", map[string]any{}},
	} {
		exists, tookExists := timed("POST", "/v1/approvals/"+theirs+c.suffix, c.token, c.body)
		absent, tookAbsent := timed("POST", "/v1/approvals/"+missing+c.suffix, c.token, c.body)
		exists.wantError(t, http.StatusNotFound, api.CodeUnknownEvent, "")
		absent.wantError(t, http.StatusNotFound, api.CodeUnknownEvent, "")
		if a, b := strings.ReplaceAll(string(exists.body), theirs, "ID"), strings.ReplaceAll(string(absent.body), missing, "ID"); a != b {
			t.Errorf("%s: the answers differ:\n%s\n%s", c.name, a, b)
		}
		// The missing request is waited for (2 s); the unreadable one must
		// take as long. Lower bounds only: a slow machine cannot fail this.
		if tookAbsent < 1900*time.Millisecond || tookExists < 1900*time.Millisecond {
			t.Errorf("%s: the unreadable request was answered in %v, the missing one in %v; both must wait the same 2 s", c.name, tookExists, tookAbsent)
		}
	}
	// The request is untouched.
	var ans recordAnswer
	e.call(t, "GET", "/v1/approvals/"+theirs, "gina-globex", nil).decode(t, &ans)
	if ans.Record.Status != contracts.StatusPending || len(ans.Record.Votes) != 0 {
		t.Fatalf("the refused vote or cancel reached the record: %+v", ans.Record)
	}
}

// /metrics counts every tenant's requests: by default it needs an admin's
// token or a scrape token, which reads nothing else; open serves it to
// anyone, off to no one.
func TestMetricsNeedAToken(t *testing.T) {
	e := setup(t)
	scrape, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	e.url = e.replica(t, func(c *api.Config) { c.MetricsTokens = []string{hash} })
	e.call(t, "GET", "/metrics", "", nil).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")
	e.call(t, "GET", "/metrics", "alice", nil).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
	e.call(t, "GET", "/metrics", "agent", nil).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
	for _, tok := range []string{"admin", scrape} {
		if r := e.call(t, "GET", "/metrics", tok, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "countersign_http_requests_total") {
			t.Fatalf("/metrics with an allowed token: %d", r.status)
		}
	}
	e.call(t, "GET", "/v1/approvals", scrape, nil).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")

	open := e.replica(t, func(c *api.Config) { c.Metrics = api.MetricsOpen })
	if r, err := http.Get(open + "/metrics"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("open /metrics: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	off := e.replica(t, func(c *api.Config) { c.Metrics = api.MetricsOff })
	req, _ := http.NewRequest("GET", off+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens["admin"])
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusNotFound {
		t.Fatalf("/metrics off: %v %v", r, err)
	} else {
		r.Body.Close()
	}
}
