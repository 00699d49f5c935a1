package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/nats-io/nats.go/jetstream"
)

type listAnswer struct {
	Items      []recordAnswer `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

func (e *env) list(t *testing.T, token string, q url.Values) listAnswer {
	t.Helper()
	r := e.call(t, "GET", "/v1/approvals?"+q.Encode(), token, nil)
	if r.status != http.StatusOK {
		t.Fatalf("list %s: %d %s", q.Encode(), r.status, r.body)
	}
	var ans listAnswer
	r.decode(t, &ans)
	return ans
}

// listAll pages through a listing and returns the event ids in order.
func (e *env) listAll(t *testing.T, token string, q url.Values, limit int) (ids []string, pages int) {
	t.Helper()
	q.Set("limit", strconv.Itoa(limit))
	for {
		ans := e.list(t, token, q)
		pages++
		if len(ans.Items) > limit {
			t.Fatalf("page of %d items, limit %d", len(ans.Items), limit)
		}
		for _, it := range ans.Items {
			ids = append(ids, it.Record.Request.EventID)
		}
		if ans.NextCursor == "" {
			return ids, pages
		}
		q.Set("cursor", ans.NextCursor)
		if pages > 100 {
			t.Fatal("paging does not end")
		}
	}
}

func TestListFiltersAndPaging(t *testing.T) {
	e := setup(t)
	var all []string
	for i, c := range []struct{ agent, run, tool string }{
		{"lister-a", "r1", "deploy"},
		{"lister-a", "r1", "payments.send"},
		{"lister-b", "r2", "deploy"},
		{"lister-b", "r2", "payments.send"},
		{"lister-a", "r3", "deploy"},
	} {
		res := e.review(t, "", contracts.Run{ID: c.run, Agent: c.agent}, toolCall{ID: "call-" + strconv.Itoa(i), Name: c.tool})
		all = append(all, res[0].EventID)
	}
	slices.Reverse(all) // newest first

	// admin reads every request; the others read those they may decide.
	ids, pages := e.listAll(t, "admin", url.Values{}, 2)
	if !slices.Equal(ids, all) || pages != 3 {
		t.Fatalf("paged %v in %d pages, want %v in 3", ids, pages, all)
	}
	ids, _ = e.listAll(t, "admin", url.Values{"status": {"pending"}}, 2)
	if !slices.Equal(ids, all) {
		t.Fatalf("pending: %v", ids)
	}
	if ids, _ = e.listAll(t, "admin", url.Values{"agent": {"lister-b"}}, 50); !slices.Equal(ids, []string{all[1], all[2]}) {
		t.Fatalf("agent filter: %v", ids)
	}
	if ids, _ = e.listAll(t, "admin", url.Values{"run_id": {"r1"}}, 1); !slices.Equal(ids, []string{all[3], all[4]}) {
		t.Fatalf("run filter: %v", ids)
	}
	// bob is not an approver of payments; alice is of everything.
	if ids, _ = e.listAll(t, "bob", url.Values{"approver": {"me"}}, 2); !slices.Equal(ids, []string{all[0], all[2], all[4]}) {
		t.Fatalf("approver=me for bob: %v", ids)
	}
	if ids, _ = e.listAll(t, "alice", url.Values{"approver": {"me"}}, 2); !slices.Equal(ids, all) {
		t.Fatalf("approver=me for alice: %v", ids)
	}
	// A decision moves a record from one status to another at once.
	e.approve(t, "bob", all[0])
	if ids, _ = e.listAll(t, "admin", url.Values{"status": {"approved"}}, 2); !slices.Equal(ids, all[:1]) {
		t.Fatalf("approved: %v", ids)
	}
	if ids, _ = e.listAll(t, "admin", url.Values{"status": {"pending"}}, 2); !slices.Equal(ids, all[1:]) {
		t.Fatalf("pending after a decision: %v", ids)
	}
	// id_prefix finds an approval by the start of its id.
	for _, id := range all {
		if ids, _ = e.listAll(t, "admin", url.Values{"id_prefix": {id[:8]}}, 50); !slices.Contains(ids, id) {
			t.Fatalf("id_prefix %s: %v", id[:8], ids)
		}
		for _, got := range ids {
			if !strings.HasPrefix(got, id[:8]) {
				t.Fatalf("id_prefix %s lists %s", id[:8], got)
			}
		}
		if ids, _ = e.listAll(t, "admin", url.Values{"id_prefix": {id}}, 50); !slices.Equal(ids, []string{id}) {
			t.Fatalf("id_prefix %s (whole): %v", id, ids)
		}
	}
	for _, q := range []string{"cursor=nope", "limit=0", "limit=x", "status=unknown", "color=red", "id_prefix=", "id_prefix=a%2Fb"} {
		r := e.call(t, "GET", "/v1/approvals?"+q, "bob", nil)
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", q, r.status, r.body)
		}
	}
	if ans := e.list(t, "bob", url.Values{"agent": {"nobody"}}); ans.Items == nil || len(ans.Items) != 0 || ans.NextCursor != "" {
		t.Fatalf("empty listing: %+v", ans)
	}
}

func TestTimeline(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-timeline", "deploy")
	e.approve(t, "bob", id)
	// The decided event is published right after the record's update (or,
	// when that publish fails on a loaded machine, when the arbiter handles
	// the vote's redelivery: the bound leaves room for it).
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	e.waitDecided(ctx, t, id)
	var tl struct {
		Events []struct {
			At      time.Time       `json:"at"`
			Kind    string          `json:"kind"`
			Subject string          `json:"subject"`
			Data    json.RawMessage `json:"data"`
		} `json:"events"`
	}
	r := e.call(t, "GET", "/v1/approvals/"+id+"/events", "agent", nil)
	if r.status != http.StatusOK {
		t.Fatalf("timeline: %d %s", r.status, r.body)
	}
	r.decode(t, &tl)
	if len(tl.Events) < 2 {
		t.Fatalf("timeline %s", r.body)
	}
	first := tl.Events[0]
	if first.Kind != "requested" || first.Subject != contracts.ToolRequestedSubject("billing-bot") {
		t.Fatalf("first event %+v", first)
	}
	var req contracts.ApprovalRequested
	if err := json.Unmarshal(first.Data, &req); err != nil || req.EventID != id {
		t.Fatalf("requested data %s: %v", first.Data, err)
	}
	last := tl.Events[len(tl.Events)-1]
	var d contracts.Decided
	if err := json.Unmarshal(last.Data, &d); err != nil {
		t.Fatal(err)
	}
	if last.Kind != "decided" || last.Subject != contracts.DecidedSubject(id) || d.Status != contracts.StatusApproved {
		t.Fatalf("last event %+v", last)
	}
	e.call(t, "GET", "/v1/approvals/unknown/events", "agent", nil).wantError(t, http.StatusNotFound, "unknown_event", "")
}

// waitDecided blocks until the decided event of id is stored.
func (e *env) waitDecided(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	e.waitStored(ctx, t, contracts.DecidedSubject(id))
}

// waitStored blocks until a message on subject is stored in HITL_EVENTS.
func (e *env) waitStored(ctx context.Context, t *testing.T, subject string) {
	t.Helper()
	// An ordered consumer delivers only what the stream has stored, so a
	// timeline read after it finds the event (a plain subscription can see
	// the publish before the stream has stored it).
	c, err := e.js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(jetstream.FetchContext(ctx)); err != nil {
		t.Fatalf("nothing stored on %s: %v", subject, err)
	}
}

func TestEventStream(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := e.openEvents(t, ctx, "alice")
	id := e.pendingApproval(t, "run-sse", "deploy")
	ev := next("requested")
	var r contracts.ApprovalRequested
	if err := json.Unmarshal([]byte(ev.data), &r); err != nil || r.EventID != id || !strings.HasPrefix(ev.id, contracts.StreamRequests+":") {
		t.Fatalf("requested event %+v: %v", ev, err)
	}
	e.approve(t, "bob", id)
	ev = next("decided")
	var d contracts.Decided
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d.EventID != id || d.Status != contracts.StatusApproved {
		t.Fatalf("decided event %+v: %v", ev, err)
	}
	cancel()
}

func TestOperations(t *testing.T) {
	e := setup(t)
	if r := e.call(t, "GET", "/healthz", "", nil); r.status != 200 || !strings.Contains(string(r.body), `"ok"`) {
		t.Fatalf("healthz: %d %s", r.status, r.body)
	}
	if r := e.call(t, "GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	e.pendingApproval(t, "run-metrics", "deploy")
	r := e.call(t, "GET", "/metrics", "admin", nil)
	for _, want := range []string{
		`countersign_http_requests_total{code="200",route="POST /v1/reviews"} 1`,
		"countersign_http_request_duration_seconds",
		"countersign_pending_approvals 1",
	} {
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("metrics lack %q:\n%s", want, r.body)
		}
	}
	e.call(t, "DELETE", "/v1/approvals", "bob", nil).wantError(t, http.StatusMethodNotAllowed, "method_not_allowed", "")
	e.call(t, "GET", "/v1/nothing", "bob", nil).wantError(t, http.StatusNotFound, "not_found", "")
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	e := setup(t)
	r := e.call(t, "GET", "/openapi.json", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	r.decode(t, &doc)
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	routes := map[string][]string{
		"/v1/reviews":                         {"post"},
		"/v1/questions":                       {"post"},
		"/v1/tools/request_human_input":       {"get"},
		"/v1/approvals":                       {"get"},
		"/v1/approvals/{event_id}":            {"get"},
		"/v1/approvals/{event_id}/votes":      {"post"},
		"/v1/votes":                           {"post"},
		"/v1/approvals/{event_id}/cancel":     {"post"},
		"/v1/approvals/{event_id}/extend":     {"post"},
		"/v1/approvals/{event_id}/claim":      {"post"},
		"/v1/approvals/{event_id}/outcome":    {"post"},
		"/v1/approvals/{event_id}/events":     {"get"},
		"/v1/events":                          {"get"},
		"/v1/policy":                          {"get", "post"},
		"/v1/policy/replay":                   {"post"},
		"/v1/grants":                          {"get"},
		"/v1/grants/{grant_id}":               {"get"},
		"/v1/grants/{grant_id}/revoke":        {"post"},
		"/v1/grants/{grant_id}/events":        {"get"},
		"/v1/oversight":                       {"get"},
		"/v1/audit/export":                    {"get"},
		"/healthz":                            {"get"},
		"/readyz":                             {"get"},
		"/metrics":                            {"get"},
		"/openapi.json":                       {"get"},
		"/.well-known/jwks.json":              {"get"},
		"/v1/receipts/use":                    {"post"},
		"/v1/passkeys":                        {"get"},
		"/v1/passkeys/{credential_id}/revoke": {"post"},
		"/v1/approvals/{event_id}/statement":  {"post"},
		"/.well-known/countersign-approvers":  {"get"},
		"/v1/push/key":                        {"get"},
		"/v1/push/subscriptions":              {"get", "post"},
		"/v1/push/subscriptions/{id}":         {"delete"},
		"/v1/push/actions":                    {"post"},
	}
	for path, methods := range routes {
		for _, m := range methods {
			if _, ok := doc.Paths[path][m]; !ok {
				t.Errorf("%s %s is not documented", m, path)
			}
		}
	}
	if len(doc.Paths) != len(routes) {
		t.Errorf("%d documented paths, %d routes", len(doc.Paths), len(routes))
	}
}
