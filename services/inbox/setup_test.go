package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
	"github.com/countersign/countersign/services/inbox"
)

// env is an API with the inbox on a real server, with an arbiter, the way
// serve runs them: each as its role's NATS user.
type env struct {
	js     jetstream.JetStream // admin, for inspection
	url    string
	tokens map[string]string // token name → bearer token
	cfg    api.Config
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter)})
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	policies := countersigntest.LivePolicy(t, apiJS, "version: \"t0\"\ndefault: require_approval\n")
	e := &env{js: js, tokens: map[string]string{}}
	var tokens []api.Token
	// bob reads every request (viewer) besides deciding those that name
	// him; carol decides only those that name her; the -acme and -globex
	// tokens are limited to their tenant.
	for _, tk := range []struct {
		name, subject  string
		roles, tenants []string
	}{
		{"agent", "agent:billing", []string{api.RoleAgent}, nil}, {"alice", "alice", []string{api.RoleApprover}, nil},
		{"bob", "bob", []string{api.RoleApprover, api.RoleViewer}, nil}, {"carol", "carol", []string{api.RoleApprover}, nil},
		{"admin", "root", []string{api.RoleAdmin}, nil},
		{"agent-acme", "agent:acme", []string{api.RoleAgent}, []string{"acme"}},
		{"alice-acme", "alice", []string{api.RoleApprover}, []string{"acme"}},
		{"gina-globex", "gina", []string{api.RoleApprover}, []string{"globex"}},
	} {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[tk.name] = tok
		tokens = append(tokens, api.Token{Name: tk.name, Subject: tk.subject, SHA256: hash, Roles: tk.roles, Tenants: tk.tenants})
	}
	e.cfg = api.Config{JS: apiJS, Gate: countersigntest.Gate(t, apiJS, policies), Policies: policies, Tokens: tokens}
	e.url = e.replica(t, nil)
	return e
}

// replica starts an API with the inbox on the setup's bus, with its
// configuration changed by edit when it is not nil, and returns its URL.
func (e *env) replica(t *testing.T, edit func(*api.Config)) string {
	t.Helper()
	cfg := e.cfg
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	if edit != nil {
		edit(&cfg)
	}
	ctx := context.Background()
	s, err := api.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.New(ctx, inbox.Config{API: s, JS: cfg.JS, Registerer: reg, Now: cfg.Now}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { _ = s.Close(); hs.CloseClientConnections(); hs.Close() })
	return hs.URL
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// call sends a request to the JSON API as the named token; body is a
// string sent as is, or a value to encode.
func (e *env) call(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	data, ok := body.(string)
	if !ok && body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		data = string(b)
	}
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader([]byte(data)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.tokens[token])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: out}
}

// record reads approval id through the API, as its approver alice.
func (e *env) record(t *testing.T, id string) contracts.Record {
	t.Helper()
	var ans struct {
		Record contracts.Record `json:"record"`
	}
	r := e.call(t, "GET", "/v1/approvals/"+id, "alice", nil)
	if r.status != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, r.status, r.body)
	}
	r.decode(t, &ans)
	return ans.Record
}

// result is one verdict of POST /v1/reviews.
type result struct {
	Verdict string `json:"verdict"`
	EventID string `json:"event_id"`
}
