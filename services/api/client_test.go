package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
)

func goClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{URL: url, Token: token, RetryFor: 10 * time.Second, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A Go agent gates a call over HTTP with the client alone: review, wait,
// claim, run once with the approved arguments; a second worker's claim is
// refused and its run reports the call as already claimed.
func TestGoClientRunsAnApprovedCallOnce(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent := goClient(t, e.url, e.tokens["agent"])
	alice := goClient(t, e.url, e.tokens["alice"])
	run := contracts.Run{ID: "go-client-1", Agent: "billing-bot", RequestedBy: "carol"}
	call := client.ToolCall{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":250,"to":"ACME"}`)}

	first, err := agent.Review(ctx, run, []client.ToolCall{call})
	if err != nil || first[0].Verdict != client.Pending || first[0].EventID == "" {
		t.Fatalf("review: %+v %v", first, err)
	}
	var ran atomic.Int32
	done := make(chan client.Result, 1)
	go func() {
		res, err := agent.Run(ctx, run, call, func(_ context.Context, args json.RawMessage) error {
			if string(args) != `{"amount":250,"to":"ACME"}` {
				t.Errorf("ran with %s", args)
			}
			ran.Add(1)
			return nil
		})
		if err != nil {
			t.Errorf("run: %v", err)
		}
		done <- res
	}()
	if _, err := alice.Decide(ctx, first[0].EventID, client.Vote{Decision: contracts.DecisionApprove}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if res := <-done; res.Verdict != client.Allowed || ran.Load() != 1 {
		t.Fatalf("run: %+v, ran %d times", res, ran.Load())
	}
	// The same run again (another worker, or a restart): claimed already.
	res, err := agent.Run(ctx, run, call, func(context.Context, json.RawMessage) error {
		ran.Add(1)
		return nil
	})
	if err != nil || res.Verdict != client.AlreadyExecuted || ran.Load() != 1 {
		t.Fatalf("second run: %+v %v, ran %d times", res, err, ran.Load())
	}
}

// A claim is idempotent per claim id: retried with the same id it
// succeeds, with another it is refused with ErrAlreadyClaimed; a claim of
// an approval not approved is ErrNotApproved. Refusals are matched with
// errors.Is and never retried.
func TestGoClientClaimAndRefusals(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent := goClient(t, e.url, e.tokens["agent"])
	bob := goClient(t, e.url, e.tokens["bob"])
	alice := goClient(t, e.url, e.tokens["alice"])
	run := contracts.Run{ID: "go-client-2", Agent: "billing-bot", RequestedBy: "carol"}
	res, err := agent.Review(ctx, run, []client.ToolCall{{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].EventID
	if _, err := agent.Claim(ctx, id, client.NewClaimID()); !errors.Is(err, client.ErrNotApproved) {
		t.Fatalf("claim before approval: %v, want ErrNotApproved", err)
	}
	if _, err := bob.Decide(ctx, id, client.Vote{Decision: contracts.DecisionApprove}); !errors.Is(err, client.ErrNotAnApprover) {
		t.Fatalf("bob's vote: %v, want ErrNotAnApprover", err)
	}
	var apiErr *client.Error
	if _, err := bob.Decide(ctx, id, client.Vote{Decision: "maybe"}); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Field == "" {
		t.Fatalf("a bad decision: %v, want a 400 naming the field", err)
	}
	if _, err := alice.Decide(ctx, id, client.Vote{Decision: contracts.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	mine := client.NewClaimID()
	rec, err := agent.Claim(ctx, id, mine)
	if err != nil || rec.Claim == nil || rec.Claim.ClaimID != mine {
		t.Fatalf("claim: %+v %v", rec, err)
	}
	if _, err := agent.Claim(ctx, id, mine); err != nil {
		t.Fatalf("the same claim retried: %v", err)
	}
	if _, err := agent.Claim(ctx, id, client.NewClaimID()); !errors.Is(err, client.ErrAlreadyClaimed) {
		t.Fatalf("another claim: %v, want ErrAlreadyClaimed", err)
	}
	got, rev, err := agent.Approval(ctx, id, 0)
	if err != nil || got.Status != contracts.StatusApproved || rev == 0 {
		t.Fatalf("approval: %+v rev %d %v", got, rev, err)
	}
}

// The client retries what may succeed later (the API restarting: the
// connection refused, 503) and gives up at once on what cannot.
func TestGoClientRetriesTransientFailuresOnly(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A front that answers 503 twice, then passes requests to the API.
	var calls atomic.Int32
	target := e.url
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"restarting"}}`))
			return
		}
		proxyTo(t, target, w, r)
	}))
	defer front.Close()
	agent := goClient(t, front.URL, e.tokens["agent"])
	run := contracts.Run{ID: "go-client-3", Agent: "billing-bot"}
	res, err := agent.Review(ctx, run, []client.ToolCall{{ID: "q", Name: "search_docs", Arguments: json.RawMessage(`{"q":"vat"}`)}})
	if err != nil || res[0].Verdict != client.Allowed || calls.Load() != 3 {
		t.Fatalf("review through two 503s: %+v %v after %d calls", res, err, calls.Load())
	}
	// A refusal (401) is not retried.
	calls.Store(10)
	stranger := goClient(t, front.URL, "not-a-token")
	if _, err := stranger.Review(ctx, run, []client.ToolCall{{ID: "q", Name: "search_docs"}}); !errors.Is(err, client.ErrUnauthenticated) || calls.Load() != 11 {
		t.Fatalf("unauthenticated: %v after %d calls, want one call", err, calls.Load()-10)
	}
	// Nothing listening: retried until RetryFor, then the network error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	c, _ := client.New(client.Config{URL: gone, Token: "x", RetryFor: 50 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	var apiErr *client.Error
	if _, err := c.Review(ctx, run, nil); err == nil || errors.As(err, &apiErr) {
		t.Fatalf("no server: %v, want a network error", err)
	}
}

func TestGoClientConfigIsChecked(t *testing.T) {
	for _, cfg := range []client.Config{{}, {URL: "ftp://x", Token: "t"}, {URL: "http://x"}, {URL: "http://x", Token: "t", MinBackoff: time.Second, MaxBackoff: time.Millisecond}} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// proxyTo passes r to the server at target and copies its answer.
func proxyTo(t *testing.T, target string, w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), r.Body)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// Ask without a question id waits on the question's approval; the human's
// answer comes back with its action and content.
func TestGoClientAskWaitsForTheAnswer(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Short polls: the first ask answers pending (nobody has answered yet
	// when it returns), and the client goes on to wait on the approval.
	asked := make(chan struct{})
	var once sync.Once
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && r.URL.Path == "/v1/questions" {
			once.Do(func() { close(asked) })
		}
		return resp, err
	})}
	agent, err := client.New(client.Config{URL: e.url, Token: e.tokens["agent"], PollWait: 100 * time.Millisecond, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	alice := goClient(t, e.url, e.tokens["alice"])
	run := contracts.Run{ID: "go-client-ask", Agent: "billing-bot"}
	got := make(chan client.Answer, 1)
	go func() {
		a, err := agent.Ask(ctx, run, client.Question{Text: "Which cost centre?"})
		if err != nil {
			t.Errorf("ask: %v", err)
		}
		got <- a
	}()
	<-asked
	// The question is an approval; alice answers it.
	var id string
	for id == "" && ctx.Err() == nil {
		var list struct {
			Items []struct {
				Record contracts.Record `json:"record"`
			} `json:"items"`
		}
		e.call(t, "GET", "/v1/approvals?status=pending&run_id=go-client-ask", "alice", nil).decode(t, &list)
		if len(list.Items) > 0 {
			id = list.Items[0].Record.Request.EventID
		}
	}
	if _, err := alice.Decide(ctx, id, client.Vote{Decision: contracts.DecisionAnswer,
		Answer: json.RawMessage(`{"action":"accept","content":{"text":"CC-42"}}`)}); err != nil {
		t.Fatalf("answer: %v", err)
	}
	a := <-got
	if a.Status != contracts.StatusAnswered || a.Answer == nil || a.Answer.Action != "accept" || string(a.Answer.Content) != `{"text":"CC-42"}` {
		t.Fatalf("answer %+v (%+v)", a, a.Answer)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A batch reviewed with ReviewEach hands over its allowed call at once,
// while the gated one still waits.
func TestGoClientReviewEachDoesNotHoldAllowedCalls(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent := goClient(t, e.url, e.tokens["agent"])
	alice := goClient(t, e.url, e.tokens["alice"])
	run := contracts.Run{ID: "go-client-each", Agent: "billing-bot", RequestedBy: "carol"}
	calls := []client.ToolCall{
		{ID: "look", Name: "search_docs", Arguments: json.RawMessage(`{"q":"vat"}`)},
		{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":3}`)},
	}
	got := make(chan string, 2)
	done := make(chan error, 1)
	go func() {
		done <- agent.ReviewEach(ctx, run, calls, func(i int, r client.Result) { got <- fmt.Sprintf("%d:%s", i, r.Verdict) })
	}()
	if first := <-got; first != "0:allowed" {
		t.Fatalf("first result handed over: %s, want 0:allowed", first)
	}
	res, err := agent.Review(ctx, run, calls[1:])
	if err != nil || res[0].Verdict != client.Pending {
		t.Fatalf("the payment: %+v %v, want still pending after the allowed call was handed over", res, err)
	}
	if _, err := alice.Decide(ctx, res[0].EventID, client.Vote{Decision: contracts.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	if second := <-got; second != "1:allowed" {
		t.Fatalf("second result: %s", second)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// With a fed waiter the process watches the approvals bucket once: the
// API's listing index hands every change to the gate's waiter, and a run
// waiting through the gate resumes on it.
func TestOneWatchOfTheBucketPerProcess(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream := "KV_" + contracts.BucketApprovals
	before := e.consumers(t, stream)

	js := e.srv.JetStreamAs(embedded.RoleAPI)
	waiter, err := orchestrator.NewFedWaiter(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: js, Policy: e.cfg.Policies, Waiter: waiter})
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	cfg := e.cfg
	reg := prometheus.NewRegistry()
	cfg.JS, cfg.Gate, cfg.Waiter, cfg.Registerer, cfg.Gatherer = js, gate, waiter, reg, reg
	s, err := api.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := e.consumers(t, stream); got != before+1 {
		t.Fatalf("%d watches of the approvals bucket after starting an API with its gate and a fed waiter, want %d (one)", got-before, 1)
	}
	run := contracts.Run{ID: "one-watch", Agent: "billing-bot", RequestedBy: "carol"}
	call := orchestrator.ToolCall{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":4}`)}
	done := make(chan []orchestrator.Verdict, 1)
	if err := gate.ReviewAsync(ctx, run, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
		if err != nil {
			t.Error(err)
		}
		done <- v
	}); err != nil {
		t.Fatal(err)
	}
	id := orchestrator.EventID(run, call.ID)
	for e.call(t, "GET", "/v1/approvals/"+id, "alice", nil).status != http.StatusOK {
		if ctx.Err() != nil {
			t.Fatal("the approval's record never appeared")
		}
	}
	e.approve(t, "alice", id)
	select {
	case v := <-done:
		if v[0].Verdict != orchestrator.VerdictAllowed {
			t.Fatalf("verdict %+v", v[0])
		}
	case <-ctx.Done():
		t.Fatal("the run waiting on the fed waiter did not resume")
	}
}

// A run and calls without ids get ids of the client's for the whole wait,
// so each long poll asks about the same approval instead of opening a new
// one (without ids, every request to the API opens its own).
func TestGoClientWaitWithoutIDsOpensOneApproval(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var posts atomic.Int32
	third := make(chan struct{})
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && r.URL.Path == "/v1/reviews" && posts.Add(1) == 3 {
			close(third)
		}
		return resp, err
	})}
	agent, err := client.New(client.Config{URL: e.url, Token: e.tokens["agent"], PollWait: 50 * time.Millisecond, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	alice := goClient(t, e.url, e.tokens["alice"])
	run := contracts.Run{Agent: "no-ids-bot"}
	done := make(chan []client.Result, 1)
	go func() {
		res, err := agent.Wait(ctx, run, []client.ToolCall{{Name: "payments.send", Arguments: json.RawMessage(`{"amount":9}`)}})
		if err != nil {
			t.Errorf("wait: %v", err)
		}
		done <- res
	}()
	<-third // three answers from the API so far: each waited for its records to exist
	keys, err := e.kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("%d approvals after three polls of one call, want 1", len(keys))
	}
	if _, err := alice.Decide(ctx, keys[0], client.Vote{Decision: contracts.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	if res := <-done; len(res) != 1 || res[0].Verdict != client.Allowed {
		t.Fatalf("wait: %+v", res)
	}
}
