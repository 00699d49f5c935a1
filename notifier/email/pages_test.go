package email_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email"
)

// resolver is a notifier.Resolver over one record in memory. Vote applies
// a simplified arbiter (one vote id once, one vote per approver, quorum of
// approvals, veto) unless answer is set, and records every call.
type resolver struct {
	mu      sync.Mutex
	rec     contracts.Record
	votes   []contracts.Vote
	reads   int
	readErr error
	// answer, when set, answers votes instead of the simplified arbiter.
	answer func(contracts.Vote) notifier.VoteResult
	// refuse, when set, names the reason the simplified arbiter refuses a
	// vote for, or "" to apply it.
	refuse func(contracts.Vote) string
}

func newResolver(rec contracts.Record) *resolver { return &resolver{rec: rec} }

func (r *resolver) Record(_ context.Context, id string) (*contracts.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	if r.readErr != nil {
		return nil, r.readErr
	}
	if id != r.rec.Request.EventID {
		return nil, notifier.ErrUnknownEvent
	}
	rec := cloneRecord(r.rec)
	return &rec, nil
}

// DecideRun is not something an email page does.
func (r *resolver) DecideRun(context.Context, string, string, contracts.Vote) (notifier.RunDecision, error) {
	return notifier.RunDecision{}, errors.New("email pages decide no runs")
}

func (r *resolver) Vote(_ context.Context, v contracts.Vote) (notifier.VoteResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.votes = append(r.votes, v)
	if r.answer != nil {
		return r.answer(v), nil
	}
	if v.EventID != r.rec.Request.EventID {
		return notifier.VoteResult{}, notifier.ErrUnknownEvent
	}
	for _, old := range r.rec.Votes {
		if old.VoteID == v.VoteID {
			rec := cloneRecord(r.rec)
			return notifier.VoteResult{Counted: true, Record: &rec}, nil
		}
	}
	refuse := func(reason string) (notifier.VoteResult, error) {
		r.rec.RefusedVotes = append(r.rec.RefusedVotes, contracts.RefusedVote{VoteID: v.VoteID, Approver: v.Approver, Decision: v.Decision, Reason: reason, At: v.DecidedAt})
		rec := cloneRecord(r.rec)
		return notifier.VoteResult{Refused: reason, Record: &rec}, nil
	}
	for _, old := range r.rec.RefusedVotes {
		if old.VoteID == v.VoteID {
			rec := cloneRecord(r.rec)
			return notifier.VoteResult{Refused: old.Reason, Record: &rec}, nil
		}
	}
	if r.rec.Terminal() {
		return refuse(contracts.ReasonClosed)
	}
	if r.refuse != nil {
		if reason := r.refuse(v); reason != "" {
			return refuse(reason)
		}
	}
	for _, old := range r.rec.Votes {
		if old.Approver.ID == v.Approver.ID {
			return refuse(contracts.ReasonDuplicateVote)
		}
	}
	r.rec.Votes = append(r.rec.Votes, v)
	decide := func(status string) {
		r.rec.Status = status
		r.rec.Outcome = &contracts.Outcome{Decision: v.Decision, Comment: v.Comment, DecidedBy: []string{v.Approver.ID}, DecidedAt: v.DecidedAt}
		if v.Answer != nil {
			r.rec.Outcome.Action, r.rec.Outcome.Arguments = v.Answer.Action, v.Answer.Content
		}
	}
	switch v.Decision {
	case contracts.DecisionApprove:
		if notifier.Approvals(&r.rec) >= r.rec.Request.Quorum.Required {
			decide(contracts.StatusApproved)
			r.rec.Outcome.DecidedBy = nil
			for _, old := range r.rec.Votes {
				r.rec.Outcome.DecidedBy = append(r.rec.Outcome.DecidedBy, old.Approver.ID)
			}
		}
	case contracts.DecisionReject:
		decide(contracts.StatusRejected)
	case contracts.DecisionRespond:
		decide(contracts.StatusResponded)
	case contracts.DecisionAnswer:
		decide(contracts.StatusAnswered)
	}
	rec := cloneRecord(r.rec)
	return notifier.VoteResult{Counted: true, Record: &rec}, nil
}

func (r *resolver) voteCalls() []contracts.Vote {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]contracts.Vote(nil), r.votes...)
}

// cloneRecord deep-copies rec through JSON, without escaping HTML so that
// what a page shows is what the test wrote.
func cloneRecord(rec contracts.Record) contracts.Record {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		panic(err)
	}
	var out contracts.Record
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		panic(err)
	}
	return out
}

func pendingRecord(req contracts.ApprovalRequested) contracts.Record {
	return contracts.Record{Spec: contracts.SpecRecord, Request: req, Status: contracts.StatusPending, ExpiresAt: req.ExpiresAt, UpdatedAt: req.CreatedAt}
}

// pagesServer serves the pages under "/e/" as the HTTP server mounts them.
type pagesServer struct {
	links *email.Links
	res   *resolver
	h     http.Handler
}

func newPages(t *testing.T, rec contracts.Record) *pagesServer {
	t.Helper()
	links := newLinks(t)
	res := newResolver(rec)
	h, err := email.NewPages(email.PagesConfig{Links: links, Resolver: res, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/e/", h)
	return &pagesServer{links: links, res: res, h: mux}
}

// token signs alice's link to the record's event, valid for an hour.
func (p *pagesServer) token(t *testing.T, approver string) (string, email.Claims) {
	t.Helper()
	c := email.Claims{EventID: p.res.rec.Request.EventID, Approver: approver, Expires: now.Add(time.Hour)}
	tok, err := p.links.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	c, err = p.links.Verify(tok, now)
	if err != nil {
		t.Fatal(err)
	}
	return tok, c
}

type response struct {
	status int
	header http.Header
	body   string
}

func (p *pagesServer) do(method, token string, form url.Values) response {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, "/e/"+token, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, req)
	return response{status: w.Code, header: w.Header(), body: w.Body.String()}
}

func (p *pagesServer) get(token string) response { return p.do(http.MethodGet, token, nil) }
func (p *pagesServer) post(token string, form url.Values) response {
	return p.do(http.MethodPost, token, form)
}

func mustContain(t *testing.T, r response, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(r.body, want) {
			t.Errorf("page (status %d) lacks %q:\n%s", r.status, want, r.body)
		}
	}
}

func mustNotContain(t *testing.T, r response, unwanted ...string) {
	t.Helper()
	for _, u := range unwanted {
		if strings.Contains(r.body, u) {
			t.Errorf("page (status %d) contains %q:\n%s", r.status, u, r.body)
		}
	}
}

func noVotes(t *testing.T, p *pagesServer) {
	t.Helper()
	if v := p.res.voteCalls(); len(v) != 0 {
		t.Errorf("Resolver.Vote was called %d times: %+v", len(v), v)
	}
}

func approveForm(req contracts.ApprovalRequested, comment string) url.Values {
	return url.Values{"decision": {"approve"}, "comment": {comment}, "h": {req.ToolCall.ArgumentsSHA256}}
}

func TestPageGetShowsFormAndNeverVotes(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, "alice")

	r := p.get(tok)
	if r.status != http.StatusOK {
		t.Fatalf("GET status %d", r.status)
	}
	mustContain(t, r,
		`<form method="post"`, `name="decision" value="approve"`, `name="decision" value="reject"`,
		`<label for="comment">Reason (optional)</label>`, `id="comment" name="comment"`,
		`<input type="hidden" name="h" value="`+req.ToolCall.ArgumentsSHA256+`">`,
		"Approval needed: payments.transfer", "Transfer 5000 EUR to ACME Ltd", "billing-agent", "run-42",
		"high", "2026-07-01T12:30:00Z", "0 of 2 approvals", "large-payments", "v7", "&#34;amount&#34;: 5000",
		"<dt>Link for</dt><dd>alice</dd>")
	// Respond is not among this request's allowed decisions.
	mustNotContain(t, r, `value="respond"`, `name="answer"`)
	for range 3 {
		p.get(tok)
	}
	head := p.do(http.MethodHead, tok, nil)
	if head.status != http.StatusOK || head.body != "" || head.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("HEAD: status %d, body %q, type %q", head.status, head.body, head.header.Get("Content-Type"))
	}
	noVotes(t, p)
}

func TestPageShowsRespondWhenAllowed(t *testing.T) {
	req := toolRequest()
	req.AllowedDecisions = append(req.AllowedDecisions, contracts.DecisionRespond)
	p := newPages(t, pendingRecord(req))
	tok, claims := p.token(t, "alice")
	r := p.get(tok)
	mustContain(t, r, `<label for="response">`, `id="response" name="response"`, `value="respond"`)

	r = p.post(tok, url.Values{"decision": {"respond"}, "h": {req.ToolCall.ArgumentsSHA256}})
	if r.status != http.StatusBadRequest {
		t.Errorf("respond without text: status %d", r.status)
	}
	noVotes(t, p)

	r = p.post(tok, url.Values{"decision": {"respond"}, "response": {"Pay 4000 instead."}, "h": {req.ToolCall.ArgumentsSHA256}})
	votes := p.res.voteCalls()
	if r.status != http.StatusOK || len(votes) != 1 || votes[0].Decision != contracts.DecisionRespond ||
		votes[0].Comment != "Pay 4000 instead." || votes[0].VoteID != email.VoteID(claims) {
		t.Fatalf("respond: status %d, votes %+v", r.status, votes)
	}
	mustContain(t, r, "Your response was recorded.")
}

func TestPagePostApproveCastsTheLinksVote(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, claims := p.token(t, "alice")

	r := p.post(tok, approveForm(req, "  looks right  "))
	if r.status != http.StatusOK {
		t.Fatalf("POST status %d:\n%s", r.status, r.body)
	}
	votes := p.res.voteCalls()
	if len(votes) != 1 {
		t.Fatalf("%d votes, want 1", len(votes))
	}
	want := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: email.VoteID(claims), EventID: eventID, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaEmail}, Comment: "looks right",
		ArgumentsSHA256: req.ToolCall.ArgumentsSHA256, DecidedAt: now,
	}
	got := votes[0]
	if got.Spec != want.Spec || got.VoteID != want.VoteID || got.EventID != want.EventID || got.Decision != want.Decision ||
		got.Approver != want.Approver || got.Comment != want.Comment || got.ArgumentsSHA256 != want.ArgumentsSHA256 ||
		!got.DecidedAt.Equal(want.DecidedAt) || got.Answer != nil || got.Arguments != nil {
		t.Errorf("vote\n got  %+v\n want %+v", got, want)
	}
	mustContain(t, r, "Your approval was recorded. 1 of 2 approvals.")
	mustNotContain(t, r, "<form")
}

func TestPagePostTwiceSaysAlreadyAnswered(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, "alice")
	if r := p.post(tok, approveForm(req, "")); r.status != http.StatusOK {
		t.Fatalf("first POST status %d", r.status)
	}
	r := p.post(tok, approveForm(req, ""))
	if r.status != http.StatusConflict {
		t.Errorf("second POST status %d, want 409", r.status)
	}
	mustContain(t, r, "You already answered with this link: Approve.", "1 of 2 approvals")
	mustNotContain(t, r, "<form")
	if n := len(p.res.voteCalls()); n != 1 {
		t.Errorf("Resolver.Vote called %d times, want once", n)
	}
	r = p.get(tok)
	if r.status != http.StatusOK {
		t.Errorf("GET after voting: status %d", r.status)
	}
	mustContain(t, r, "You already answered with this link: Approve.")
	mustNotContain(t, r, "<form")
}

func TestPageLinkOfApproverWhoVotedElsewhereShowsNoForm(t *testing.T) {
	req := toolRequest()
	rec := pendingRecord(req)
	rec.Votes = []contracts.Vote{{VoteID: "slack-vote", EventID: eventID, Decision: contracts.DecisionApprove, Approver: contracts.Approver{ID: "alice", Via: contracts.ViaSlack}}}
	p := newPages(t, rec)
	tok, _ := p.token(t, "alice")
	r := p.get(tok)
	mustContain(t, r, "You already answered this request via slack: Approve.", "1 of 2 approvals")
	mustNotContain(t, r, "<form")
	if r := p.post(tok, approveForm(req, "")); r.status != http.StatusConflict {
		t.Errorf("POST status %d, want 409", r.status)
	}
	noVotes(t, p)
}

func TestPageSecondApprovalShowsOutcome(t *testing.T) {
	req := toolRequest()
	rec := pendingRecord(req)
	rec.Votes = []contracts.Vote{{VoteID: "bob-vote", EventID: eventID, Decision: contracts.DecisionApprove, Approver: contracts.Approver{ID: "bob", Via: contracts.ViaSlack}, ArgumentsSHA256: req.ToolCall.ArgumentsSHA256}}
	p := newPages(t, rec)
	tok, _ := p.token(t, "alice")
	r := p.post(tok, approveForm(req, ""))
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	mustContain(t, r, "Your approval was recorded.", "Approved by bob via slack, alice via email, 2 of 2")
}

func TestPageRefusedVote(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	p.res.answer = func(v contracts.Vote) notifier.VoteResult {
		return notifier.VoteResult{Refused: contracts.ReasonNotAnApprover, Detail: "approvers are alice and bob"}
	}
	tok, _ := p.token(t, "mallory")
	r := p.post(tok, approveForm(req, ""))
	if r.status != http.StatusForbidden {
		t.Errorf("status %d, want 403", r.status)
	}
	mustContain(t, r, "Your answer was not counted: "+contracts.Reason(contracts.ReasonNotAnApprover).Message(), "approvers are alice and bob")
	if n := len(p.res.voteCalls()); n != 1 {
		t.Errorf("%d votes, want 1", n)
	}
}

// A link whose vote was refused says why and still shows the form: only a
// counted vote uses a link up.
func TestPageLinkWithRefusedVoteSaysSoAndCanStillAnswer(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, claims := p.token(t, "carol")
	p.res.rec.RefusedVotes = []contracts.RefusedVote{{VoteID: email.VoteID(claims), Approver: contracts.Approver{ID: "carol", Via: contracts.ViaEmail}, Decision: contracts.DecisionApprove, Reason: contracts.ReasonSelfApproval}}
	r := p.get(tok)
	mustContain(t, r, "Your last answer with this link (Approve) was not counted: "+contracts.Reason(contracts.ReasonSelfApproval).Message(),
		"This link can still answer.", "<form")
	mustNotContain(t, r, "You already answered")
	noVotes(t, p)
}

// The requester approves through their link and is refused; the same link
// then still shows the form, and a rejection through it counts, with a vote
// id of its own.
func TestPageRefusedVoteDoesNotUseTheLink(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, claims := p.token(t, "carol")
	p.res.refuse = func(v contracts.Vote) string {
		if v.Approver.ID == "carol" && v.Decision == contracts.DecisionApprove {
			return contracts.ReasonSelfApproval
		}
		return ""
	}
	r := p.post(tok, approveForm(req, ""))
	if r.status != http.StatusForbidden {
		t.Errorf("self-approval: status %d, want 403", r.status)
	}
	mustContain(t, r, "Your answer was not counted: "+contracts.Reason(contracts.ReasonSelfApproval).Message(), "This link can still answer.", "<form")

	r = p.get(tok)
	if r.status != http.StatusOK {
		t.Errorf("GET after the refusal: status %d", r.status)
	}
	mustContain(t, r, "was not counted: "+contracts.Reason(contracts.ReasonSelfApproval).Message(), `name="decision" value="reject"`)
	mustNotContain(t, r, "You already answered")

	r = p.post(tok, url.Values{"decision": {"reject"}, "comment": {"not this month"}, "h": {req.ToolCall.ArgumentsSHA256}})
	if r.status != http.StatusOK {
		t.Fatalf("reject after the refusal: status %d:\n%s", r.status, r.body)
	}
	mustContain(t, r, "Your rejection was recorded.")
	votes := p.res.voteCalls()
	if len(votes) != 2 || votes[0].VoteID != email.VoteID(claims) || votes[1].VoteID != email.AttemptVoteID(claims, 1) ||
		votes[1].VoteID == votes[0].VoteID {
		t.Fatalf("votes %+v: want the link's first id, then its second", votes)
	}
	if p.res.rec.Status != contracts.StatusRejected {
		t.Errorf("status %s, want rejected", p.res.rec.Status)
	}
	// Now the link is used up.
	r = p.get(tok)
	mustContain(t, r, "You already answered with this link: Reject.")
	mustNotContain(t, r, "<form")
}

func TestPageVoteInFlight(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	p.res.answer = func(contracts.Vote) notifier.VoteResult { return notifier.VoteResult{InFlight: true} }
	tok, _ := p.token(t, "alice")
	r := p.post(tok, approveForm(req, ""))
	if r.status != http.StatusAccepted {
		t.Errorf("status %d, want 202", r.status)
	}
	mustContain(t, r, "Your answer is being counted.")
}

func TestPageResolverFailure(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, "alice")
	p.res.readErr = errors.New("nats: timeout")
	for _, r := range []response{p.get(tok), p.post(tok, approveForm(req, ""))} {
		if r.status != http.StatusServiceUnavailable {
			t.Errorf("status %d, want 503", r.status)
		}
		mustNotContain(t, r, "nats: timeout")
	}
	noVotes(t, p)
}

func TestPageUnknownEvent(t *testing.T) {
	p := newPages(t, pendingRecord(toolRequest()))
	tok, err := p.links.Sign(email.Claims{EventID: "0190d1a2-0000-7def-8123-456789abcdef", Approver: "alice", Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	r := p.get(tok)
	if r.status != http.StatusNotFound {
		t.Errorf("status %d, want 404", r.status)
	}
	mustNotContain(t, r, "<form")
}

func TestPageExpiredOrInvalidTokenNeverVotes(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	expired, err := p.links.Sign(email.Claims{EventID: eventID, Approver: "alice", Expires: now})
	if err != nil {
		t.Fatal(err)
	}
	valid, _ := p.token(t, "alice")
	foreign, _ := newLinks(t, email.Key{ID: "k1", Secret: secret(9)}).Sign(email.Claims{EventID: eventID, Approver: "alice", Expires: now.Add(time.Hour)})
	tests := []struct {
		name, token string
		status      int
		text        string
	}{
		{"expired", expired, http.StatusGone, "This link has expired"},
		{"tampered", valid[:len(valid)-2] + "xx", http.StatusBadRequest, "This link is not valid"},
		{"other key", foreign, http.StatusBadRequest, "This link is not valid"},
		{"garbage", "hello", http.StatusBadRequest, "This link is not valid"},
	}
	for _, tt := range tests {
		for _, r := range []response{p.get(tt.token), p.post(tt.token, approveForm(req, ""))} {
			if r.status != tt.status {
				t.Errorf("%s: status %d, want %d", tt.name, r.status, tt.status)
			}
			mustContain(t, r, tt.text)
			mustNotContain(t, r, "<form", "Transfer 5000")
		}
	}
	noVotes(t, p)
	if p.res.reads != 0 {
		t.Errorf("an invalid link read the record %d times", p.res.reads)
	}
}

func TestPageDecidedRecordShowsOutcomeAndNoForm(t *testing.T) {
	rec := decidedRecord()
	p := newPages(t, rec)
	tok, _ := p.token(t, "carol")
	r := p.get(tok)
	if r.status != http.StatusOK {
		t.Errorf("status %d", r.status)
	}
	mustContain(t, r, "This request is closed: Approved with edited arguments by alice via email, bob via slack", "capped at 4000",
		"Arguments (as edited by alice)", "&#34;amount&#34;: 4000")
	mustNotContain(t, r, "<form")
	if r := p.post(tok, approveForm(rec.Request, "")); r.status != http.StatusConflict {
		t.Errorf("POST on a decided request: status %d, want 409", r.status)
	}
	noVotes(t, p)
}

func TestPageStaleArgumentsShowsTheNewOnesWithoutVoting(t *testing.T) {
	req := toolRequest()
	rec := pendingRecord(req)
	edited := json.RawMessage(`{"amount":100,"currency":"EUR","to":"ACME Ltd"}`)
	rec.Votes = []contracts.Vote{{VoteID: "bob-edit", EventID: eventID, Decision: contracts.DecisionEdit, Arguments: edited, Approver: contracts.Approver{ID: "bob", Via: contracts.ViaWeb}}}
	p := newPages(t, rec)
	p.res.answer = func(contracts.Vote) notifier.VoteResult {
		return notifier.VoteResult{Refused: contracts.ReasonStaleArguments}
	}
	newSHA, err := contracts.ArgumentsSHA256(edited)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := p.token(t, "alice")
	// The page shows the edited arguments and their hash.
	mustContain(t, p.get(tok), "Arguments (as edited by bob)", `name="h" value="`+newSHA+`"`)

	r := p.post(tok, approveForm(req, "")) // the hash of the original arguments
	if r.status != http.StatusConflict {
		t.Errorf("status %d, want 409", r.status)
	}
	mustContain(t, r, "The arguments changed since you opened this page", `name="h" value="`+newSHA+`"`, "&#34;amount&#34;: 100")
	noVotes(t, p)
}

func TestPageEscapesRecordHTML(t *testing.T) {
	req := toolRequest()
	req.Summary = "<script>alert(1)</script>"
	req.Run.Agent = `"><img src=x onerror=alert(2)>`
	req.ToolCall.Arguments = json.RawMessage(`{"note":"</pre><script>alert(3)</script>"}`)
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, `alice<b>`)
	r := p.get(tok)
	mustNotContain(t, r, "<script", "<img", "<b>")
	mustContain(t, r, "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;", "&lt;/pre&gt;&lt;script&gt;alert(3)", "alice&lt;b&gt;")
}

func TestPageSecurityHeaders(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, "alice")
	want := map[string]string{
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
		"Content-Type":            "text/html; charset=utf-8",
	}
	pages := map[string]response{
		"GET":      p.get(tok),
		"HEAD":     p.do(http.MethodHead, tok, nil),
		"invalid":  p.get("nope"),
		"POST":     p.post(tok, approveForm(req, "")),
		"PUT":      p.do(http.MethodPut, tok, url.Values{}),
		"answered": p.post(tok, approveForm(req, "")),
	}
	for name, r := range pages {
		for k, v := range want {
			if got := r.header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", name, k, got, v)
			}
		}
	}
}

func TestPageMethodNotAllowed(t *testing.T) {
	p := newPages(t, pendingRecord(toolRequest()))
	tok, _ := p.token(t, "alice")
	for _, m := range []string{http.MethodPut, http.MethodDelete, http.MethodPatch} {
		r := p.do(m, tok, url.Values{"decision": {"approve"}})
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET, HEAD, POST" {
			t.Errorf("%s: status %d, Allow %q", m, r.status, r.header.Get("Allow"))
		}
	}
	noVotes(t, p)
}

func TestPageBodyLimit(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, "alice")
	form := approveForm(req, strings.Repeat("x", 70<<10))
	if r := p.post(tok, form); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", r.status)
	}
	noVotes(t, p)
}

func TestPageBadDecisions(t *testing.T) {
	req := toolRequest()
	p := newPages(t, pendingRecord(req))
	tok, _ := p.token(t, "alice")
	for _, form := range []url.Values{
		{"h": {req.ToolCall.ArgumentsSHA256}},
		{"decision": {"answer"}, "h": {req.ToolCall.ArgumentsSHA256}},
		{"decision": {"respond"}, "response": {"x"}, "h": {req.ToolCall.ArgumentsSHA256}}, // not allowed by the request
		{"decision": {"edit"}, "h": {req.ToolCall.ArgumentsSHA256}},
		{"decision": {"approve"}}, // no hash
	} {
		r := p.post(tok, form)
		if r.status != http.StatusBadRequest {
			t.Errorf("%v: status %d, want 400", form, r.status)
		}
		mustContain(t, r, `<form method="post"`, `class="notice error"`)
	}
	noVotes(t, p)
}

func TestPageHumanInput(t *testing.T) {
	req := humanRequest()
	p := newPages(t, pendingRecord(req))
	tok, claims := p.token(t, "alice")

	r := p.get(tok)
	mustContain(t, r, `<label for="answer">Answer (JSON)</label>`, `id="answer" name="answer"`,
		`value="answer"`, `value="decline"`, "Which dataset should I use?", "&#34;dataset&#34;")
	mustNotContain(t, r, `value="approve"`, `name="h"`)

	r = p.post(tok, url.Values{"decision": {"answer"}, "answer": {`{"dataset": oops}`}})
	if r.status != http.StatusBadRequest {
		t.Errorf("invalid JSON: status %d, want 400", r.status)
	}
	mustContain(t, r, "Your answer is not valid JSON", "Nothing was sent", `{&#34;dataset&#34;: oops}</textarea>`)
	noVotes(t, p)

	r = p.post(tok, url.Values{"decision": {"answer"}, "answer": {`{"dataset": "ds-1", "dataset": "ds-9"}`}})
	if r.status != http.StatusBadRequest {
		t.Errorf("repeated key: status %d, want 400", r.status)
	}
	mustContain(t, r, "gives the key &#34;dataset&#34; twice", "Nothing was sent")
	noVotes(t, p)

	r = p.post(tok, url.Values{"decision": {"answer"}, "answer": {"{\n  \"dataset\": \"ds-9\"\n}"}, "comment": {"newest one"}})
	votes := p.res.voteCalls()
	if r.status != http.StatusOK || len(votes) != 1 {
		t.Fatalf("answer: status %d, %d votes:\n%s", r.status, len(votes), r.body)
	}
	v := votes[0]
	if v.Decision != contracts.DecisionAnswer || v.Answer == nil || v.Answer.Action != contracts.AnswerAccept ||
		string(v.Answer.Content) != `{"dataset":"ds-9"}` || v.ArgumentsSHA256 != "" || v.Comment != "newest one" ||
		v.VoteID != email.VoteID(claims) || v.Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaEmail}) {
		t.Errorf("answer vote %+v (answer %+v)", v, v.Answer)
	}
	mustContain(t, r, "Your answer was recorded.", "Answered by alice via email")
}

func TestPageHumanInputDecline(t *testing.T) {
	p := newPages(t, pendingRecord(humanRequest()))
	tok, _ := p.token(t, "alice")
	r := p.post(tok, url.Values{"decision": {"decline"}, "answer": {"ignored"}})
	votes := p.res.voteCalls()
	if r.status != http.StatusOK || len(votes) != 1 || votes[0].Decision != contracts.DecisionAnswer ||
		votes[0].Answer == nil || votes[0].Answer.Action != contracts.AnswerDecline || votes[0].Answer.Content != nil {
		t.Fatalf("decline: status %d, votes %+v", r.status, votes)
	}
	mustContain(t, r, "You declined to answer; this was recorded.")
}

// TestPagesMountedWithPattern serves the pages with the pattern
// "/e/{token}" over real HTTP.
func TestPagesMountedWithPattern(t *testing.T) {
	req := toolRequest()
	links := newLinks(t)
	res := newResolver(pendingRecord(req))
	h, err := email.NewPages(email.PagesConfig{Links: links, Resolver: res, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/e/{token}", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tok, err := links.Sign(email.Claims{EventID: eventID, Approver: "alice", Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Get(srv.URL + "/e/" + tok)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<form") {
		t.Fatalf("GET status %d:\n%s", resp.StatusCode, body)
	}
	resp, err = srv.Client().PostForm(srv.URL+"/e/"+tok, approveForm(req, ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(res.voteCalls()) != 1 {
		t.Errorf("POST status %d, %d votes", resp.StatusCode, len(res.voteCalls()))
	}
}

func TestNewPagesRequiresLinksAndResolver(t *testing.T) {
	if _, err := email.NewPages(email.PagesConfig{Resolver: newResolver(contracts.Record{})}); err == nil || !strings.Contains(err.Error(), "Links") {
		t.Errorf("without Links: %v", err)
	}
	if _, err := email.NewPages(email.PagesConfig{Links: newLinks(t)}); err == nil || !strings.Contains(err.Error(), "Resolver") {
		t.Errorf("without Resolver: %v", err)
	}
}
