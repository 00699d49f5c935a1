package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

const testPolicy = `
version: "t1"
default: require_approval
rules:
  - name: reads
    tools: ["search_*"]
    action: allow
  - name: no-shell
    tools: ["shell.*"]
    action: deny
    reason: "Shell is off limits."
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice]
`

// crowd is how many extra approver tokens every test server accepts.
const crowd = 50

type env struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	url    string
	tokens map[string]string // token name → bearer token
	// cfg is the API's configuration, for more replicas on the same bus.
	cfg api.Config
	srv *eventstest.Server
	// handler is the API's handler, for driving it without a connection.
	handler http.Handler
	// voteRequests counts the vote requests sent, by approval.
	voteRequests *requestCounter
}

// replica starts one more API server on the same bus with the setup's
// configuration, changed by edit when it is not nil, and returns its URL.
func (e *env) replica(t *testing.T, edit func(*api.Config)) string {
	t.Helper()
	cfg := e.cfg
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	if edit != nil {
		edit(&cfg)
	}
	s, err := api.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

func setup(t testing.TB) *env {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), UnknownEventDelay: 20 * time.Millisecond, UnknownEventAttempts: 3})
	// The test policy serves until a test applies another through the API.
	policies := countersigntest.LivePolicy(t, srv.JetStreamAs(embedded.RoleAPI), testPolicy)
	gate := countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleAPI), policies)

	e := &env{js: js, tokens: map[string]string{}, srv: srv, voteRequests: countRequests(t, srv, contracts.SubjectVotePrefix)}
	var tokens []api.Token
	add := func(name, subject string, roles ...string) {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[name] = tok
		tokens = append(tokens, api.Token{Name: name, Subject: subject, SHA256: hash, Roles: roles})
	}
	add("agent", "agent:billing", api.RoleAgent)
	add("alice", "alice", api.RoleApprover)
	// bob also reads every request (viewer), so that his votes on requests
	// that do not name him reach the arbiter and are refused there.
	add("bob", "bob", api.RoleApprover, api.RoleViewer)
	add("admin", "root", api.RoleAdmin)
	for i := range crowd {
		add(fmt.Sprintf("approver-%d", i), fmt.Sprintf("approver-%d", i), api.RoleApprover)
	}
	reg := prometheus.NewRegistry()
	e.cfg = api.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Policies: policies, Tokens: tokens, Registerer: reg, Gatherer: reg}
	s, err := api.New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e.handler = s.Handler()
	hs := httptest.NewServer(e.handler)
	t.Cleanup(hs.Close)
	e.url = hs.URL
	if e.kv, err = js.KeyValue(ctx, contracts.BucketApprovals); err != nil {
		t.Fatal(err)
	}
	return e
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

type apiErr struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// wantError checks status, code and (when given) field of an error answer.
func (r response) wantError(t *testing.T, status int, code, field string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var e apiErr
	r.decode(t, &e)
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error %s, want code %s", r.body, code)
	}
	if field != "" && e.Error.Field != field {
		t.Fatalf("error field %q, want %q (%s)", e.Error.Field, field, r.body)
	}
}

// call sends a request as the named token ("" for none). body may be nil,
// a string (sent as is) or a value to encode.
func (e *env) call(t testing.TB, method, path, token string, body any) response {
	t.Helper()
	return e.callCtx(context.Background(), t, method, path, token, body)
}

func (e *env) callCtx(ctx context.Context, t testing.TB, method, path, token string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		tok, ok := e.tokens[token]
		if !ok {
			tok = token
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

type result struct {
	ToolCallID string          `json:"tool_call_id"`
	Verdict    string          `json:"verdict"`
	EventID    string          `json:"event_id"`
	Reason     string          `json:"reason"`
	Code       string          `json:"code"`
	Rule       string          `json:"rule"`
	Arguments  json.RawMessage `json:"arguments"`
	Edited     bool            `json:"edited"`
	Diff       json.RawMessage `json:"diff"`
}

type recordAnswer struct {
	Record   contracts.Record `json:"record"`
	Revision uint64           `json:"revision"`
}

type toolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

func reviewBody(run contracts.Run, calls ...toolCall) map[string]any {
	return map[string]any{"run": run, "tool_calls": calls}
}

// review posts a review as the agent and returns its results.
func (e *env) review(t testing.TB, query string, run contracts.Run, calls ...toolCall) []result {
	t.Helper()
	r := e.call(t, "POST", "/v1/reviews"+query, "agent", reviewBody(run, calls...))
	if r.status != http.StatusOK {
		t.Fatalf("review: status %d: %s", r.status, r.body)
	}
	var ans struct {
		Results []result `json:"results"`
	}
	r.decode(t, &ans)
	if len(ans.Results) != len(calls) {
		t.Fatalf("review: %d results for %d calls", len(ans.Results), len(calls))
	}
	return ans.Results
}

// pendingApproval creates one approval of tool and returns its event id.
func (e *env) pendingApproval(t testing.TB, runID, tool string) string {
	t.Helper()
	res := e.review(t, "", contracts.Run{ID: runID, Agent: "billing-bot"}, toolCall{ID: "c1", Name: tool, Arguments: json.RawMessage(`{"amount":5}`)})
	if res[0].Verdict != orchestrator.VerdictPending || res[0].EventID == "" {
		t.Fatalf("want a pending approval, got %+v", res[0])
	}
	return res[0].EventID
}

func (e *env) vote(t *testing.T, token, eventID string, body any) response {
	t.Helper()
	return e.call(t, "POST", "/v1/approvals/"+eventID+"/votes", token, body)
}

// approve votes approve and expects it to count.
func (e *env) approve(t *testing.T, token, eventID string) recordAnswer {
	t.Helper()
	r := e.vote(t, token, eventID, map[string]any{"decision": "approve"})
	if r.status != http.StatusOK {
		t.Fatalf("approve: status %d: %s", r.status, r.body)
	}
	var ans recordAnswer
	r.decode(t, &ans)
	return ans
}
