// Package client is the Go client of Countersign's HTTP API: the way a Go
// agent gates its tool calls, asks a human, claims an approval and decides
// one, with nothing but a URL and a bearer token — no NATS credential.
//
// A gated call goes review → wait → claim → run:
//
//	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080", Token: token})
//	res, err := c.Run(ctx, run, call, func(ctx context.Context, args json.RawMessage) error {
//		return payments.Send(ctx, args) // runs at most once, with the approved arguments
//	})
//
// Run returns the Result whatever the decision; a call that does not run
// leaves its Reason, a message meant for the model. The lower-level calls
// (Review, Wait, Claim) let a runtime do each step itself, for instance to
// suspend a run between review and decision.
//
// Transient failures — the network (a refused or broken connection, an
// answer that does not come within Config.RequestTimeout beyond the wait
// asked for), 502, 503 and 504, and a claim the arbiter has not confirmed
// yet (202) — are retried with backoff; a refusal never is. A wait (Wait,
// ReviewEach, Ask, and Run's wait and claim) retries them until its
// context ends: it survives any restart of the server, however late in a
// long poll and however long the server is away, because every request it
// repeats is idempotent (a review by run id and tool call id, a claim by
// claim id). A single call (Review, Claim, Approval, Cancel, Decide)
// retries them for Config.RetryFor, counted from its first failure. Every
// API error is an *Error carrying the API's stable code; match it with
// errors.Is against the sentinels (ErrAlreadyClaimed, ErrNotApproved, ...).
//
// Run hands the tool function the receipt of the call (Receipt(ctx)), for a
// tool that verifies receipts; SetReceiptHeader puts it on an outgoing
// request.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/contracts"
)

// Verdicts a review answers with, per tool call (DESIGN §5).
const (
	Allowed         = "allowed"
	Denied          = "denied"
	Pending         = "pending"
	Responded       = "responded"
	Answered        = "answered"
	Expired         = "expired"
	Cancelled       = "cancelled"
	AlreadyExecuted = "already_executed"
)

// maxWait is the longest wait the API grants one request.
const maxWait = 60 * time.Second

// Config configures a Client.
type Config struct {
	// URL is the API's base URL, e.g. http://127.0.0.1:8080 (required).
	URL string
	// Token is the bearer token (required).
	Token string
	// HTTPClient sends the requests (default: a client without a timeout;
	// every call is bounded by its context and the API's own waits).
	HTTPClient *http.Client
	// RetryFor bounds how long a single call retries transient failures,
	// from its first failure (default 30 s). Waits retry them until their
	// context ends instead.
	RetryFor time.Duration
	// MinBackoff and MaxBackoff bound the wait between retries (default
	// 100 ms and 2 s; the wait doubles up to the maximum).
	MinBackoff, MaxBackoff time.Duration
	// PollWait is how long one request waits at the API for a decision
	// before it is asked again (default and most: 60 s, the API's limit).
	PollWait time.Duration
	// RequestTimeout bounds each request beyond the wait it asks the API
	// for (default 30 s): an answer that does not come by then (a server
	// gone without closing the connection) counts as a network failure.
	RequestTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.RetryFor == 0 {
		c.RetryFor = 30 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 2 * time.Second
	}
	if c.PollWait == 0 || c.PollWait > maxWait {
		c.PollWait = maxWait
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("client: Config.URL is required"))
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("client: Config.URL %q is not an http(s) URL", c.URL))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("client: Config.Token is required"))
	}
	if c.RetryFor < 0 || c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff {
		errs = append(errs, errors.New("client: Config.RetryFor, MinBackoff and MaxBackoff must be positive, MinBackoff ≤ MaxBackoff"))
	}
	if c.PollWait < 0 || c.RequestTimeout < 0 {
		errs = append(errs, errors.New("client: Config.PollWait and RequestTimeout must be positive"))
	}
	return errors.Join(errs...)
}

// Client talks to one Countersign API. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, base: strings.TrimRight(cfg.URL, "/")}, nil
}

// ToolCall is one call the agent proposes.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ToolSchema is the JSON Schema of the arguments (optional); a human's
	// edit must satisfy it.
	ToolSchema json.RawMessage `json:"tool_schema,omitempty"`
}

// Result is the answer for one tool call.
type Result struct {
	ToolCallID string `json:"tool_call_id"`
	Verdict    string `json:"verdict"`
	EventID    string `json:"event_id,omitempty"`
	// Reason is a message the agent can hand the model as the tool result
	// when the call does not run.
	Reason string `json:"reason,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// Arguments to run with (possibly edited by a human).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// GrantID names the standing grant that allowed the call without a
	// new request.
	GrantID string `json:"grant_id,omitempty"`
	// Receipt is the receipt Countersign signed for the call: in a review's
	// answer, for a call allowed without an approval (under a standing
	// grant, or by a policy rule with receipt: true); in Run's, also the
	// receipt of the claim of an approved call (Claim's answer holds it in
	// Record.Claim.Receipt). Pass it to the tool (the Countersign-Receipt
	// header; see Receipt and SetReceiptHeader).
	Receipt string `json:"receipt,omitempty"`
	// OutcomeErr, in Run's answer, says why the call's outcome could not
	// be reported after it ran (nil when it was, or there was no claim).
	OutcomeErr error `json:"-"`
}

// Terminal reports whether the result is final (not pending).
func (r Result) Terminal() bool { return r.Verdict != Pending }

// Review submits the calls and returns at once: gated calls not decided yet
// are Pending with their event id. Reviewing the same run and call ids
// again re-attaches to the same approvals.
func (c *Client) Review(ctx context.Context, run contracts.Run, calls []ToolCall) ([]Result, error) {
	return c.review(ctx, run, calls, 0, retryTransient)
}

// Wait reviews the calls and blocks until none is pending or ctx ends
// (then it returns ctx's error with the results so far). Transient
// failures are retried until ctx ends: a wait outlives restarts of the
// server (calls without ids get ids of the client's, so that each poll
// re-attaches to the same approvals).
func (c *Client) Wait(ctx context.Context, run contracts.Run, calls []ToolCall) ([]Result, error) {
	run, calls = withIDs(run, calls)
	var results []Result
	for {
		r, err := c.review(ctx, run, calls, c.cfg.PollWait, retryTransient|retryUntilDone)
		if err != nil {
			return results, err
		}
		if results = r; !pending(results) {
			return results, nil
		}
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
}

// ReviewEach reviews the calls and hands each result to each as soon as
// it is final: allowed and denied calls at once, before anything waits,
// gated ones as humans decide. An agent runs its allowed calls from each
// instead of holding them until the batch's last pending call is decided.
// It returns when no call is pending, or with ctx's error.
func (c *Client) ReviewEach(ctx context.Context, run contracts.Run, calls []ToolCall, each func(i int, r Result)) error {
	run, calls = withIDs(run, calls)
	reported := make([]bool, len(calls))
	results, err := c.review(ctx, run, calls, 0, retryTransient|retryUntilDone)
	for err == nil {
		for i, r := range results {
			if r.Terminal() && !reported[i] {
				reported[i] = true
				each(i, r)
			}
		}
		if !pending(results) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		results, err = c.review(ctx, run, calls, c.cfg.PollWait, retryTransient|retryUntilDone)
	}
	return err
}

// withIDs gives a run and its calls the ids they lack, so that asking the
// API again (each wait is a new request) re-attaches to the same approvals
// instead of opening new ones. Without ids the API opens an approval per
// request. The caller's values are not changed.
func withIDs(run contracts.Run, calls []ToolCall) (contracts.Run, []ToolCall) {
	if run.ID == "" {
		run.ID = "run-" + randomHex()
	}
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call-%d-%s", i, randomHex())
		}
		out[i] = c
	}
	return run, out
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func pending(rs []Result) bool {
	for _, r := range rs {
		if !r.Terminal() {
			return true
		}
	}
	return false
}

func (c *Client) review(ctx context.Context, run contracts.Run, calls []ToolCall, wait time.Duration, rt retry) ([]Result, error) {
	path := "/v1/reviews"
	if wait > 0 {
		path += "?wait=" + wait.String()
	}
	var out struct {
		Results []Result `json:"results"`
	}
	body := struct {
		Run       contracts.Run `json:"run"`
		ToolCalls []ToolCall    `json:"tool_calls"`
	}{run, calls}
	if _, err := c.do(ctx, http.MethodPost, path, wait, body, &out, rt); err != nil {
		return nil, err
	}
	if len(out.Results) != len(calls) {
		return nil, fmt.Errorf("client: the API answered %d results for %d calls", len(out.Results), len(calls))
	}
	return out.Results, nil
}

// NewClaimID returns a fresh claim id. Keep it with the run (across a
// restart of this process, too) to retry a claim whose answer was lost.
func NewClaimID() string {
	return "claim-" + randomHex() + randomHex()
}

// Claim marks the approval eventID as used, right before the tool runs. It
// succeeds once per approval: retried with the same claimID (after a
// timeout, a lost answer, a restart) it succeeds again; with any other id
// it fails with ErrAlreadyClaimed. A claim the arbiter has not confirmed
// yet (202) is retried, as are transient failures. An approval that is not
// approved fails with ErrNotApproved.
func (c *Client) Claim(ctx context.Context, eventID, claimID string) (*contracts.Record, error) {
	return c.claim(ctx, eventID, claimID, retryTransient|retryAccepted)
}

func (c *Client) claim(ctx context.Context, eventID, claimID string, rt retry) (*contracts.Record, error) {
	if claimID == "" {
		return nil, errors.New("client: Claim needs a claim id (see NewClaimID)")
	}
	var out struct {
		Record contracts.Record `json:"record"`
	}
	if _, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(eventID)+"/claim", 0,
		map[string]string{"claim_id": claimID}, &out, rt); err != nil {
		return nil, err
	}
	return &out.Record, nil
}

// Cancel cancels the pending approval eventID, as the agent that submitted
// it (or an approver or admin of it), with reason for the log. Transient
// failures are retried until ctx ends; a cancellation the arbiter has not
// confirmed within the API's wait (202) is durable and counts as done. An
// approval decided already fails with ErrClosed.
func (c *Client) Cancel(ctx context.Context, eventID, reason string) error {
	var body map[string]string
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(eventID)+"/cancel", 0, body, nil, retryTransient)
	return err
}

// Run gates one call: it reviews it, waits for the decision, claims an
// approval and then calls fn with the arguments to run (the approved ones,
// possibly edited by a human). A call the policy allows outright runs with
// no claim. A call that may not run returns its Result (Reason says why)
// without calling fn. fn runs at most once per approval across the fleet.
//
// The wait and the claim retry transient failures until ctx ends (the
// claim with one claim id, so a claim whose answer was lost to a restart
// is not refused as another's). fn's context carries the call's receipt,
// when Countersign signed one: Receipt(ctx) returns it, and
// SetReceiptHeader puts it on a request to a tool that verifies receipts
// (receipt.Middleware). Result.Receipt holds it too.
func (c *Client) Run(ctx context.Context, run contracts.Run, call ToolCall,
	fn func(ctx context.Context, args json.RawMessage) error) (Result, error) {
	results, err := c.Wait(ctx, run, []ToolCall{call})
	if err != nil {
		return Result{}, err
	}
	res := results[0]
	if res.Verdict != Allowed {
		return res, nil
	}
	if res.EventID != "" {
		rec, err := c.claim(ctx, res.EventID, NewClaimID(), retryTransient|retryAccepted|retryUntilDone)
		if err != nil {
			if errors.Is(err, ErrAlreadyClaimed) {
				res.Verdict = AlreadyExecuted
				res.Reason = "This approved call was already claimed; Countersign does not know whether the tool then ran. It will not run again."
				return res, nil
			}
			return res, err
		}
		if rec.Claim != nil && rec.Claim.Receipt != "" {
			res.Receipt = rec.Claim.Receipt
		}
	}
	err = fn(WithReceipt(ctx, res.Receipt), res.Arguments)
	if res.EventID != "" {
		res.OutcomeErr = c.reportRun(ctx, res.EventID, err)
	}
	return res, err
}

// reportRun reports how fn ended for the claimed approval eventID: after
// fn, even when ctx has ended meanwhile (within a minute of its own).
func (c *Client) reportRun(ctx context.Context, eventID string, fnErr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	status, summary := Succeeded, ""
	if fnErr != nil {
		status, summary = Failed, truncateUTF8(fnErr.Error(), contracts.MaxExecutionSummaryBytes)
	}
	return c.Report(ctx, eventID, NewClaimID(), Outcome{Status: status, Summary: summary})
}

// Outcome statuses (Outcome.Status).
const (
	Succeeded = contracts.ExecutionSucceeded
	Failed    = contracts.ExecutionFailed
)

// Outcome is how a claimed call ended.
type Outcome struct {
	// Status is Succeeded or Failed.
	Status string `json:"status"`
	// Summary is a short text for people (at most 1 KiB).
	Summary string `json:"summary,omitempty"`
	// ResultSHA256 is the lowercase hex SHA-256 of the call's result
	// (optional; see contracts.ArgumentsSHA256 for JSON results).
	ResultSHA256 string `json:"result_sha256,omitempty"`
}

// Report tells Countersign how the claimed call eventID ended, as its
// claimant, once: retried with the same reportID (after a lost answer, a
// restart) it succeeds again; another report fails (ErrClosed family:
// outcome_reported). Run reports by itself; a runner that claims with
// Claim reports with Report after the tool ran.
func (c *Client) Report(ctx context.Context, eventID, reportID string, o Outcome) error {
	body := struct {
		CommandID string `json:"command_id"`
		Outcome
	}{reportID, o}
	_, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(eventID)+"/outcome", 0, body, nil, retryTransient|retryAccepted)
	return err
}

// RunApprovals lists the approvals of run runID the caller may read, newest
// first (at most 100).
func (c *Client) RunApprovals(ctx context.Context, runID string) ([]contracts.Record, error) {
	var out struct {
		Items []struct {
			Record contracts.Record `json:"record"`
		} `json:"items"`
	}
	q := url.Values{"run_id": {runID}, "limit": {"100"}}
	if _, err := c.do(ctx, http.MethodGet, "/v1/approvals?"+q.Encode(), 0, nil, &out, retryTransient); err != nil {
		return nil, err
	}
	recs := make([]contracts.Record, 0, len(out.Items))
	for _, it := range out.Items {
		recs = append(recs, it.Record)
	}
	return recs, nil
}

// truncateUTF8 cuts s to at most n bytes on a character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Question asks a human (request_human_input).
type Question struct {
	// ID makes the question idempotent within the run (optional).
	ID     string          `json:"id,omitempty"`
	Text   string          `json:"text"`
	Schema json.RawMessage `json:"schema,omitempty"`
}

// Answer is a human's answer to a Question.
type Answer struct {
	EventID string `json:"event_id,omitempty"`
	// Status is answered, or pending, expired, cancelled, denied.
	Status string `json:"status"`
	Answer *struct {
		Action     string          `json:"action"`
		Content    json.RawMessage `json:"content,omitempty"`
		AnsweredBy string          `json:"answered_by,omitempty"`
	} `json:"answer,omitempty"`
	Reason string `json:"reason,omitempty"`
	Rule   string `json:"rule,omitempty"`
}

// Ask asks a human and waits for the answer until ctx ends.
func (c *Client) Ask(ctx context.Context, run contracts.Run, q Question) (Answer, error) {
	body := struct {
		Run      contracts.Run `json:"run"`
		ID       string        `json:"id,omitempty"`
		Question Question      `json:"question"`
	}{run, q.ID, Question{Text: q.Text, Schema: q.Schema}}
	for {
		var a Answer
		if _, err := c.do(ctx, http.MethodPost, "/v1/questions?wait="+c.cfg.PollWait.String(), c.cfg.PollWait, body, &a, retryTransient|retryUntilDone); err != nil {
			return a, err
		}
		if a.Status != Pending {
			return a, nil
		}
		if q.ID == "" && a.EventID != "" {
			// Without an id the question could not be found again: wait
			// on its approval instead.
			return c.awaitAnswer(ctx, a)
		}
		if ctx.Err() != nil {
			return a, ctx.Err()
		}
	}
}

func (c *Client) awaitAnswer(ctx context.Context, a Answer) (Answer, error) {
	for {
		rec, _, err := c.approval(ctx, a.EventID, c.cfg.PollWait, retryTransient|retryUntilDone)
		if err != nil {
			return a, err
		}
		if rec.Terminal() {
			a.Status = rec.Status
			if rec.Outcome != nil {
				a.Reason = rec.Outcome.Reason
			}
			if rec.Status == contracts.StatusAnswered && rec.Outcome != nil {
				// The outcome's action is the answer's; its arguments hold
				// the accepted content.
				a.Answer = &struct {
					Action     string          `json:"action"`
					Content    json.RawMessage `json:"content,omitempty"`
					AnsweredBy string          `json:"answered_by,omitempty"`
				}{Action: rec.Outcome.Action, Content: rec.Outcome.Arguments}
				if len(rec.Outcome.DecidedBy) > 0 {
					a.Answer.AnsweredBy = rec.Outcome.DecidedBy[0]
				}
			}
			return a, nil
		}
	}
}

// Approval reads an approval's record and its revision. With wait > 0 it
// returns when the record is terminal or the wait (at most 60 s) elapses.
func (c *Client) Approval(ctx context.Context, eventID string, wait time.Duration) (*contracts.Record, uint64, error) {
	return c.approval(ctx, eventID, wait, retryTransient)
}

func (c *Client) approval(ctx context.Context, eventID string, wait time.Duration, rt retry) (*contracts.Record, uint64, error) {
	path := "/v1/approvals/" + url.PathEscape(eventID)
	wait = min(max(wait, 0), maxWait)
	if wait > 0 {
		path += "?wait=" + wait.String()
	}
	var out struct {
		Record   contracts.Record `json:"record"`
		Revision uint64           `json:"revision"`
	}
	if _, err := c.do(ctx, http.MethodGet, path, wait, nil, &out, rt); err != nil {
		return nil, 0, err
	}
	return &out.Record, out.Revision, nil
}

// Vote is a decision on an approval, as its approver (the token's subject).
type Vote struct {
	// VoteID makes the vote idempotent (optional; the API makes one).
	VoteID   string `json:"vote_id,omitempty"`
	Decision string `json:"decision"`
	Comment  string `json:"comment,omitempty"`
	// Arguments are the edited arguments (decision edit).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ArgumentsSHA256 is the hash of the arguments the approver saw; a vote
	// on arguments that changed since is refused (stale_arguments).
	ArgumentsSHA256 string `json:"arguments_sha256,omitempty"`
	// Answer answers a question (decision answer).
	Answer json.RawMessage `json:"answer,omitempty"`
}

// Decide sends v on eventID and returns the record once the vote is
// counted. A refused vote is an *Error with the refusal's code
// (ErrSelfApproval, ErrNotAnApprover, ...); a vote the arbiter has not
// applied within the API's wait returns ErrInFlight (it is durable: read
// the approval later).
func (c *Client) Decide(ctx context.Context, eventID string, v Vote) (*contracts.Record, error) {
	var out struct {
		Record contracts.Record `json:"record"`
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(eventID)+"/votes", 0, v, &out, retryTransient)
	if err != nil {
		return nil, err
	}
	if status == http.StatusAccepted {
		return nil, ErrInFlight
	}
	return &out.Record, nil
}

// retry says which answers a request retries.
type retry int

const (
	retryTransient retry = 1 << iota // network errors, 502, 503, 504
	retryAccepted                    // 202: applied later by the arbiter
	// retryUntilDone retries until ctx ends instead of for RetryFor: a
	// wait, whose every request is idempotent.
	retryUntilDone
)

// do sends one JSON request, retrying what rt allows, and decodes a 2xx
// answer into out. Other answers are an *Error. wait is how long the
// request asks the API to wait; the answer is awaited RequestTimeout
// longer. Retries go on until ctx ends with retryUntilDone, else for
// RetryFor from the first failure.
func (c *Client) do(ctx context.Context, method, path string, wait time.Duration, body, out any, rt retry) (int, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, fmt.Errorf("client: encode request: %w", err)
		}
	}
	var deadline time.Time // of retries, set at the first failure
	backoff := c.cfg.MinBackoff
	for {
		status, err := c.once(ctx, method, path, wait, payload, out)
		again := false
		switch {
		case err == nil && status == http.StatusAccepted && rt&retryAccepted != 0:
			again = true
		case err == nil:
			return status, nil
		case rt&retryTransient != 0 && transient(err):
			again = true
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(c.cfg.RetryFor)
		}
		if !again || (rt&retryUntilDone == 0 && time.Now().After(deadline)) {
			if err == nil {
				err = ErrInFlight
			}
			return status, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

// once sends one request and waits for its answer for wait plus
// RequestTimeout. A non-2xx answer is an *Error.
func (c *Client) once(ctx context.Context, method, path string, wait time.Duration, payload []byte, out any) (int, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, wait+c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		if parent.Err() != nil {
			return 0, parent.Err()
		}
		return 0, &netError{err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, &netError{err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil && len(data) > 0 && resp.StatusCode != http.StatusAccepted {
			if err := json.Unmarshal(data, out); err != nil {
				return resp.StatusCode, fmt.Errorf("client: %s %s: undecodable answer: %w", method, path, err)
			}
		}
		return resp.StatusCode, nil
	}
	apiErr := &Error{Status: resp.StatusCode}
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &env) == nil && env.Error.Code != "" {
		apiErr.Code, apiErr.Message, apiErr.Field = env.Error.Code, env.Error.Message, env.Error.Field
	} else {
		apiErr.Code, apiErr.Message = "http_"+fmt.Sprint(resp.StatusCode), strings.TrimSpace(string(data))
	}
	return resp.StatusCode, apiErr
}

// netError is a failure to reach the API or read its answer.
type netError struct{ err error }

func (e *netError) Error() string { return "client: " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// transient reports whether err may succeed if sent again.
func transient(err error) bool {
	var n *netError
	if errors.As(err, &n) {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		switch e.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}
