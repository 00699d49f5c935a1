package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/contracts/receipt"
)

var payment = client.ToolCall{ID: "call-1", Name: "payments.send",
	Arguments: json.RawMessage(`{"amount":1250,"currency":"EUR","recipient":"Globex GmbH"}`)}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 200*time.Millisecond
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// approve has alice approve the call of run, once it is pending.
func approve(ctx context.Context, t *testing.T, s *serveProc, run contracts.Run, call client.ToolCall) string {
	t.Helper()
	agent := newClient(t, client.Config{URL: s.url, Token: s.agentToken})
	res, err := agent.Review(ctx, run, []client.ToolCall{call})
	if err != nil || res[0].Verdict != client.Pending {
		t.Fatalf("review: %+v %v", res, err)
	}
	alice := newClient(t, client.Config{URL: s.url, Token: s.aliceToken})
	if _, err := alice.Decide(ctx, res[0].EventID, client.Vote{Decision: contracts.DecisionApprove}); err != nil {
		t.Fatalf("alice's vote: %v", err)
	}
	return res[0].EventID
}

// TestWaitSurvivesServerRestartLateInPoll: serve is killed (SIGKILL) late
// in a long poll — after the retry window, counted from the start of that
// request, has passed — and started again a while later; the approval
// decided after the restart still reaches Run, which claims it and runs the
// tool exactly once.
func TestWaitSurvivesServerRestartLateInPoll(t *testing.T) {
	s := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The transport tells when a waiting review is sent.
	polls := make(chan time.Time, 64)
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/v1/reviews" && r.URL.Query().Get("wait") != "" {
			select {
			case polls <- time.Now():
			default:
			}
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	const retryFor = 300 * time.Millisecond
	agent := newClient(t, client.Config{URL: s.url, Token: s.agentToken, HTTPClient: hc,
		PollWait: 5 * time.Second, RetryFor: retryFor})
	run := contracts.Run{ID: "run-restart", Agent: "billing-bot", RequestedBy: "carol"}

	var ran atomic.Int32
	type outcome struct {
		res client.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := agent.Run(ctx, run, payment, func(ctx context.Context, args json.RawMessage) error {
			ran.Add(1)
			return nil
		})
		done <- outcome{res, err}
	}()

	var started time.Time
	select {
	case started = <-polls:
	case <-ctx.Done():
		t.Fatal("no waiting review was sent")
	}
	// Late in the poll: the retry window, counted from this request's
	// start, is over; the poll has seconds to go. Only time can say so.
	time.Sleep(time.Until(started.Add(3 * retryFor)))
	s.kill()
	select {
	case o := <-done:
		t.Fatalf("the wait ended when the server died: %+v %v", o.res, o.err)
	default:
	}
	s.start() // the same data directory and port
	approve(ctx, t, s, run, payment)

	o := <-done
	if o.err != nil || o.res.Verdict != client.Allowed {
		t.Fatalf("run across the restart: %+v %v", o.res, o.err)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	// Run again (a retry, another worker): it does not run twice.
	res, err := agent.Run(ctx, run, payment, func(context.Context, json.RawMessage) error {
		ran.Add(1)
		return nil
	})
	if err != nil || res.Verdict != client.AlreadyExecuted || ran.Load() != 1 {
		t.Fatalf("second run: %+v %v, the tool ran %d times", res, err, ran.Load())
	}
}

// receiptTool is a tool behind receipt.Middleware (receipts from s,
// single use through store) that counts its runs.
func receiptTool(t *testing.T, s *serveProc, store receipt.ReplayStore, runs *atomic.Int32) *httptest.Server {
	t.Helper()
	keys, err := receipt.NewFetcher(receipt.FetcherConfig{URL: s.url + "/.well-known/jwks.json"})
	if err != nil {
		t.Fatal(err)
	}
	h := receipt.Middleware(receipt.MiddlewareConfig{Tool: payment.Name, Options: receipt.Options{Keys: keys, Replay: store}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			_, _ = io.WriteString(w, `{"paid":true}`)
		}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// callTool posts args to the tool with the receipt of ctx and returns the
// status and the error code of the answer.
func callTool(ctx context.Context, t *testing.T, toolURL string, args json.RawMessage) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, toolURL, bytes.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	client.SetReceiptHeader(req)
	return send(t, req)
}

func send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error.Code
}

// TestRunHandsTheReceiptToTheTool: a tool that enforces receipts
// (receipt.Middleware) runs behind client.Run: the tool function finds the
// claim's receipt in its context and sends it with SetReceiptHeader.
func TestRunHandsTheReceiptToTheTool(t *testing.T) {
	s := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var runs atomic.Int32
	tool := receiptTool(t, s, receipt.NewMemoryReplayStore(), &runs)

	run := contracts.Run{ID: "run-receipt", Agent: "billing-bot", RequestedBy: "carol"}
	approve(ctx, t, s, run, payment)
	agent := newClient(t, client.Config{URL: s.url, Token: s.agentToken})
	var status int
	var code, seen string
	res, err := agent.Run(ctx, run, payment, func(ctx context.Context, args json.RawMessage) error {
		seen = client.Receipt(ctx)
		status, code = callTool(ctx, t, tool.URL, args)
		return nil
	})
	if err != nil || res.Verdict != client.Allowed {
		t.Fatalf("run: %+v %v", res, err)
	}
	if status != http.StatusOK || runs.Load() != 1 {
		t.Fatalf("the tool answered %d %s and ran %d times, want 200 once", status, code, runs.Load())
	}
	if seen == "" || seen != res.Receipt {
		t.Fatalf("the tool function's receipt %q, the result's %q", seen, res.Receipt)
	}
	// Without the receipt the tool refuses.
	status, code = callTool(context.Background(), t, tool.URL, payment.Arguments)
	if status != http.StatusUnauthorized || code != "receipt_missing" {
		t.Fatalf("without a receipt: %d %s", status, code)
	}
}

// TestReplicasShareServerReplayStore: two replicas of a tool, each with
// its own receipt.ServerReplayStore on the same Countersign, accept a
// receipt once between them; a replica started afresh refuses it too.
func TestReplicasShareServerReplayStore(t *testing.T) {
	s := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := func() receipt.ReplayStore {
		st, err := receipt.NewServerReplayStore(receipt.ServerReplayStoreConfig{URL: s.url, Token: s.aliceToken})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	var runs atomic.Int32
	a, b := receiptTool(t, s, store(), &runs), receiptTool(t, s, store(), &runs)

	run := contracts.Run{ID: "run-replicas", Agent: "billing-bot", RequestedBy: "carol"}
	eventID := approve(ctx, t, s, run, payment)
	agent := newClient(t, client.Config{URL: s.url, Token: s.agentToken})
	rec, err := agent.Claim(ctx, eventID, client.NewClaimID())
	if err != nil || rec.Claim == nil || rec.Claim.Receipt == "" {
		t.Fatalf("claim: %+v %v", rec, err)
	}
	withReceipt := client.WithReceipt(ctx, rec.Claim.Receipt)

	if status, code := callTool(withReceipt, t, a.URL, payment.Arguments); status != http.StatusOK {
		t.Fatalf("replica a, first use: %d %s", status, code)
	}
	for name, tool := range map[string]*httptest.Server{"replica b": b, "replica a again": a, "a new replica": receiptTool(t, s, store(), &runs)} {
		if status, code := callTool(withReceipt, t, tool.URL, payment.Arguments); status != http.StatusConflict || code != "receipt_replayed" {
			t.Errorf("%s: %d %s, want 409 receipt_replayed", name, status, code)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the tool ran %d times, want once", runs.Load())
	}
	// The store says so itself, and fails closed when it cannot ask.
	err = store().Use(ctx, "an-unused-id", time.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("a fresh id: %v", err)
	}
	if err := store().Use(ctx, "an-unused-id", time.Now().Add(time.Minute)); !errors.Is(err, receipt.ErrReplayed) {
		t.Fatalf("a used id: %v, want ErrReplayed", err)
	}
	bad, _ := receipt.NewServerReplayStore(receipt.ServerReplayStoreConfig{URL: s.url, Token: "cs_not-a-token"})
	if err := bad.Use(ctx, "another-id", time.Now().Add(time.Minute)); err == nil || receipt.Code(err) != "receipt_unavailable" {
		t.Fatalf("an unknown token: %v, want receipt_unavailable", err)
	}
}
