package inbox_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// inboxPolicy gates refunds for alice, with edits allowed, and a summary
// built from the agent's arguments.
const inboxPolicy = `version: "inbox-1"
default: require_approval
rules:
  - name: refunds
    tools: ["billing.refund"]
    action: require_approval
    risk: high
    approvers: [alice]
    allowed_decisions: [approve, reject, edit]
    summary: "Refund {{args.amount}} EUR to {{args.customer}}"
`

const inboxRefundSchema = `{"type":"object","properties":{"amount":{"type":"number","maximum":1000},"customer":{"type":"string"},"note":{"type":"string"}},"required":["amount","customer"]}`

// webClient is one browser-like session with the inbox.
type webClient struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

func (e *env) applyInboxPolicy(t *testing.T) {
	t.Helper()
	if r := e.call(t, "POST", "/v1/policy", "admin", inboxPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
}

// refund asks for a refund through the gate and returns its event id.
func (e *env) refund(t *testing.T, runID, customer, note string, amount int) string {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"amount": amount, "customer": customer, "note": note})
	body := map[string]any{
		"run":        map[string]any{"id": runID, "agent": "billing-bot", "requested_by": "agent:billing"},
		"tool_calls": []map[string]any{{"id": "c1", "name": "billing.refund", "arguments": json.RawMessage(args), "tool_schema": json.RawMessage(inboxRefundSchema)}},
	}
	r := e.call(t, "POST", "/v1/reviews", "agent", body)
	var ans struct {
		Results []result `json:"results"`
	}
	r.decode(t, &ans)
	if r.status != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("refund review: %d %s", r.status, r.body)
	}
	return ans.Results[0].EventID
}

func newWebClient(t *testing.T, base string) *webClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &webClient{t: t, base: base, c: c}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn opens a session as the named token's owner.
func (e *env) signIn(t *testing.T, name string) *webClient {
	t.Helper()
	w := newWebClient(t, e.url)
	r := w.login(url.Values{"token": {e.tokens[name]}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("sign in as %s: %d %s", name, r.status, r.body)
	}
	page := w.get("/")
	m := csrfInput.FindSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		t.Fatalf("inbox after sign-in: %d %s", page.status, page.body)
	}
	w.csrf = string(m[1])
	return w
}

func (w *webClient) do(req *http.Request) response {
	w.t.Helper()
	resp, err := w.c.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func (w *webClient) get(path string) response {
	w.t.Helper()
	req, err := http.NewRequest("GET", w.base+path, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return w.do(req)
}

func (w *webClient) post(path string, form url.Values) response {
	w.t.Helper()
	req, err := http.NewRequest("POST", w.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return w.do(req)
}

// login signs in as a browser does: it opens the sign-in form, then posts
// form with the form's CSRF token.
func (w *webClient) login(form url.Values) response {
	w.t.Helper()
	page := w.get("/login")
	if page.status == http.StatusSeeOther {
		// Signed in already: GET /login redirects. The form is opened
		// without the session, and its login cookie kept.
		fresh := newWebClient(w.t, w.base)
		page = fresh.get("/login")
		loginURL := mustURL(w.t, w.base+"/login")
		for _, c := range fresh.c.Jar.Cookies(loginURL) {
			c.Path = "/login"
			w.c.Jar.SetCookies(loginURL, []*http.Cookie{c})
		}
	}
	m := csrfInput.FindSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		w.t.Fatalf("sign-in form: %d %s", page.status, page.body)
	}
	form.Set("csrf", string(m[1]))
	return w.post("/login", form)
}

func (w *webClient) decide(id string, form url.Values) response {
	w.t.Helper()
	if !form.Has("csrf") {
		form.Set("csrf", w.csrf)
	}
	return w.post("/approvals/"+id+"/decide", form)
}

// followDecision checks that a decision was answered with 303 See Other to
// the request's page, and opens that page.
func (w *webClient) followDecision(id string, r response) response {
	w.t.Helper()
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/approvals/"+id {
		w.t.Fatalf("decision: %d, Location %q, want 303 to /approvals/%s\n%s", r.status, r.header.Get("Location"), id, r.body)
	}
	return w.get(r.header.Get("Location"))
}

func sessionCookieOf(t *testing.T, r response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "countersign_session" {
			return c
		}
	}
	return nil
}

func TestInboxLoginSetsSessionCookieFlags(t *testing.T) {
	e := setup(t)

	// A page without a session sends the person to the sign-in form.
	anon := newWebClient(t, e.url)
	r := anon.get("/approvals/abc")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/login?next=%2Fapprovals%2Fabc" {
		t.Fatalf("anonymous page: %d %q", r.status, r.header.Get("Location"))
	}
	r = anon.get("/login")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `<label for="token">API token</label>`) {
		t.Fatalf("login form: %d %s", r.status, r.body)
	}
	for h, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
	} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}

	// A wrong token: no session.
	r = anon.login(url.Values{"token": {"cs_not-a-token"}})
	if r.status != http.StatusUnauthorized || sessionCookieOf(t, r) != nil || !strings.Contains(string(r.body), "not valid") {
		t.Fatalf("bad token: %d %v %s", r.status, r.header, r.body)
	}

	// A good token over plain HTTP: HttpOnly, SameSite=Strict, Path=/, not Secure.
	r = anon.login(url.Values{"token": {e.tokens["alice"]}, "next": {"/history"}})
	c := sessionCookieOf(t, r)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/history" || c == nil {
		t.Fatalf("login: %d %v", r.status, r.header)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || len(c.Value) < 43 {
		t.Fatalf("cookie flags: %+v", c)
	}
	// Behind a TLS-terminating proxy the cookie is Secure.
	behind := newWebClient(t, e.url)
	form := csrfInput.FindSubmatch(behind.get("/login").body)
	req, _ := http.NewRequest("POST", e.url+"/login", strings.NewReader(url.Values{"token": {e.tokens["alice"]}, "csrf": {string(form[1])}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	if c := sessionCookieOf(t, behind.do(req)); c == nil || !c.Secure {
		t.Fatalf("cookie behind TLS: %+v", c)
	}
	// The session opens the pages; a redirect to another site is not followed.
	if r := anon.get("/history"); r.status != http.StatusOK || !strings.Contains(string(r.body), "alice") {
		t.Fatalf("history with the session: %d", r.status)
	}
	r = anon.login(url.Values{"token": {e.tokens["alice"]}, "next": {"//evil.example/"}})
	if r.header.Get("Location") != "/" {
		t.Fatalf("open redirect: %q", r.header.Get("Location"))
	}
	// Attack: paths a browser reads as another site (it drops tabs and line
	// breaks, and reads a backslash as a slash), signed in (GET) and at
	// sign-in (POST).
	for _, next := range []string{"/\t/evil.example/phish", "/\n/evil.example", "/\r\n/evil.example", "/\\evil.example",
		"/\\/evil.example", "/%2F/evil.example", "https://evil.example/", "/ /evil.example", "/\u3000/evil.example"} {
		if r := anon.get("/login?next=" + url.QueryEscape(next)); r.status != http.StatusSeeOther || r.header.Get("Location") != "/" {
			t.Errorf("GET /login?next=%q signed in: %d Location %q, want /", next, r.status, r.header.Get("Location"))
		}
		if r := anon.login(url.Values{"token": {e.tokens["alice"]}, "next": {next}}); r.header.Get("Location") != "/" {
			t.Errorf("POST /login next=%q: Location %q, want /", next, r.header.Get("Location"))
		}
	}
	// A path on this server is kept.
	if r := anon.get("/login?next=" + url.QueryEscape("/approvals/abc?tab=votes")); r.header.Get("Location") != "/approvals/abc?tab=votes" {
		t.Errorf("a local next: Location %q", r.header.Get("Location"))
	}
}

// Login CSRF: another site's form cannot sign a visitor in (as the
// attacker, whose inbox would then collect what the visitor does). The
// sign-in form carries a token that must match the cookie the sign-in page
// set; a post without it, with another browser's, or with a forged cookie
// pair the attacker cannot plant, opens no session.
func TestInboxLoginNeedsTheSignInFormsCSRFToken(t *testing.T) {
	e := setup(t)
	victim := newWebClient(t, e.url)
	// A cross-site form post: no token, no login cookie.
	r := victim.post("/login", url.Values{"token": {e.tokens["alice"]}})
	if r.status != http.StatusForbidden || sessionCookieOf(t, r) != nil {
		t.Fatalf("sign-in without the form's token: %d %v", r.status, r.header)
	}
	// The attacker's own form token, posted from the victim's browser
	// (which holds its own login cookie): refused.
	attacker := newWebClient(t, e.url)
	theirs := csrfInput.FindSubmatch(attacker.get("/login").body)
	mine := csrfInput.FindSubmatch(victim.get("/login").body)
	if theirs == nil || mine == nil || string(theirs[1]) == string(mine[1]) {
		t.Fatalf("each sign-in form has a token of its own: %q %q", theirs, mine)
	}
	r = victim.post("/login", url.Values{"token": {e.tokens["alice"]}, "csrf": {string(theirs[1])}})
	if r.status != http.StatusForbidden || sessionCookieOf(t, r) != nil {
		t.Fatalf("sign-in with another form's token: %d %v", r.status, r.header)
	}
	// The refusal shows the form again, with a token that works.
	again := csrfInput.FindSubmatch(r.body)
	if again == nil || !strings.Contains(string(r.body), "Sign in again") {
		t.Fatalf("the refusal does not show the form: %s", r.body)
	}
	r = victim.post("/login", url.Values{"token": {e.tokens["alice"]}, "csrf": {string(again[1])}})
	if r.status != http.StatusSeeOther || sessionCookieOf(t, r) == nil {
		t.Fatalf("sign-in with the form's own token: %d %v", r.status, r.header)
	}
	if r := victim.get("/history"); r.status != http.StatusOK {
		t.Fatalf("the session does not open the inbox: %d", r.status)
	}
}

func TestInboxPostWithoutCSRFIsForbiddenAndCastsNoVote(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	id := e.refund(t, "run-csrf", "Globex", "", 120)
	alice := e.signIn(t, "alice")

	for name, csrf := range map[string]string{"missing": "", "wrong": strings.Repeat("x", len(alice.csrf))} {
		form := url.Values{"decision": {"approve"}}
		if csrf != "" {
			form.Set("csrf", csrf)
		}
		req, _ := http.NewRequest("POST", e.url+"/approvals/"+id+"/decide", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if r := alice.do(req); r.status != http.StatusForbidden {
			t.Fatalf("%s CSRF token: status %d, want 403", name, r.status)
		}
	}
	if r := alice.post("/logout", url.Values{}); r.status != http.StatusForbidden {
		t.Fatalf("logout without CSRF: %d, want 403", r.status)
	}
	if rec := e.record(t, id); len(rec.Votes) != 0 || len(rec.RefusedVotes) != 0 || rec.Status != contracts.StatusPending {
		t.Fatalf("a vote was cast without a CSRF token: %+v", rec)
	}

	// The header form of the token works, and the vote counts, via the web.
	req, _ := http.NewRequest("POST", e.url+"/approvals/"+id+"/decide", strings.NewReader(url.Values{"decision": {"approve"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", alice.csrf)
	r := alice.followDecision(id, alice.do(req))
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `id="outcome"`) {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	rec := e.record(t, id)
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaWeb}) {
		t.Fatalf("record after approve: %+v", rec)
	}
}

func TestInboxOtherApproverCannotDecide(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	id := e.refund(t, "run-other", "Initech", "", 80)
	bob := e.signIn(t, "bob")

	page := bob.get("/approvals/" + id)
	body := string(page.body)
	if page.status != http.StatusOK || strings.Contains(body, `id="approve-form"`) || strings.Contains(body, `id="reject-form"`) ||
		!strings.Contains(body, "You are not an approver of this request") {
		t.Fatalf("bob's view: %d %s", page.status, body)
	}
	// "Only mine" leaves the request out for bob.
	if r := bob.get("/?mine=1"); strings.Contains(string(r.body), id) {
		t.Fatalf("only mine lists a request bob may not decide")
	}
	if r := bob.get("/"); !strings.Contains(string(r.body), id) {
		t.Fatalf("the inbox does not list the request")
	}

	// A forged post is refused by the arbiter and recorded.
	r := bob.decide(id, url.Values{"decision": {"approve"}})
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), `data-reason="not_an_approver"`) {
		t.Fatalf("forged approve: %d %s", r.status, r.body)
	}
	rec := e.record(t, id)
	if rec.Status != contracts.StatusPending || len(rec.Votes) != 0 || len(rec.RefusedVotes) != 1 ||
		rec.RefusedVotes[0].Reason != contracts.ReasonNotAnApprover || rec.RefusedVotes[0].Approver.ID != "bob" {
		t.Fatalf("record after forged vote: %+v", rec)
	}
}

func TestInboxEscapesAgentSuppliedContent(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	const evil = `<script>alert("pwned")</script>`
	id := e.refund(t, "run-xss", evil, `<img src=x onerror=alert(1)>`, 10)
	alice := e.signIn(t, "alice")
	for _, path := range []string{"/", "/approvals/" + id, "/?fragment=rows", "/approvals/" + id + "?fragment=status"} {
		r := alice.get(path)
		body := string(r.body)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d", path, r.status)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("%s renders agent content unescaped:\n%s", path, body)
		}
		if path == "/" || path == "/approvals/"+id {
			if !strings.Contains(body, "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;") {
				t.Fatalf("%s does not show the escaped summary:\n%s", path, body)
			}
		}
	}
}

func TestInboxEditSchemaErrorShowsNextToField(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	id := e.refund(t, "run-edit", "Umbrella", "", 200)
	alice := e.signIn(t, "alice")
	page := string(alice.get("/approvals/" + id).body)
	h := regexp.MustCompile(`name="h" value="([0-9a-f]{64})"`).FindStringSubmatch(page)
	if h == nil || !strings.Contains(page, `id="edit-form"`) {
		t.Fatalf("no edit form:\n%s", page)
	}

	r := alice.decide(id, url.Values{"decision": {"edit"}, "h": {h[1]}, "arguments": {`{"amount": 5000, "customer": "Umbrella"}`}})
	errText := regexp.MustCompile(`id="arguments-error" role="alert">([^<]*)<`).FindStringSubmatch(string(r.body))
	if r.status != http.StatusBadRequest || errText == nil || !strings.HasPrefix(errText[1], "arguments/amount: ") {
		t.Fatalf("schema error: %d %q\n%s", r.status, errText, r.body)
	}
	// The edited text stays in the editor for another try.
	if !strings.Contains(string(r.body), `&#34;amount&#34;: 5000`) && !strings.Contains(string(r.body), `"amount": 5000`) {
		t.Fatalf("the editor lost the edit:\n%s", r.body)
	}
	// Not JSON at all is answered at the field too.
	r = alice.decide(id, url.Values{"decision": {"edit"}, "h": {h[1]}, "arguments": {`amount=5`}})
	if errText := regexp.MustCompile(`id="arguments-error" role="alert">([^<]+)<`).FindStringSubmatch(string(r.body)); r.status != http.StatusBadRequest || errText == nil {
		t.Fatalf("non-JSON edit: %d\n%s", r.status, r.body)
	}
	if rec := e.record(t, id); rec.Status != contracts.StatusPending || len(rec.Votes) != 0 {
		t.Fatalf("an invalid edit changed the record: %+v", rec)
	}

	// A valid edit counts and approves the new arguments.
	r = alice.followDecision(id, alice.decide(id, url.Values{"decision": {"edit"}, "h": {h[1]}, "arguments": {`{"amount": 150, "customer": "Umbrella"}`}}))
	if r.status != http.StatusOK {
		t.Fatalf("valid edit: %d\n%s", r.status, r.body)
	}
	rec := e.record(t, id)
	if rec.Status != contracts.StatusApproved || rec.Outcome == nil || string(rec.Outcome.Arguments) != `{"amount":150,"customer":"Umbrella"}` {
		t.Fatalf("after the edit: %+v", rec)
	}
}

func TestInboxLogoutEndsSession(t *testing.T) {
	e := setup(t)
	alice := e.signIn(t, "alice")
	cookie := alice.c.Jar.Cookies(mustURL(t, e.url))
	r := alice.post("/logout", url.Values{"csrf": {alice.csrf}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/login" {
		t.Fatalf("logout: %d %v", r.status, r.header)
	}
	if c := sessionCookieOf(t, r); c == nil || c.MaxAge >= 0 {
		t.Fatalf("logout does not clear the cookie: %+v", c)
	}
	// The old session id no longer opens anything, even if a client keeps it.
	replay := newWebClient(t, e.url)
	replay.c.Jar.SetCookies(mustURL(t, e.url), cookie)
	if r := replay.get("/"); r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/login") {
		t.Fatalf("old session after logout: %d %v", r.status, r.header)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/inbox/events", nil)
	if r := replay.do(req); r.status != http.StatusUnauthorized {
		t.Fatalf("event stream after logout: %d", r.status)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestInboxAnswersQuestionInWords(t *testing.T) {
	e := setup(t)
	r := e.call(t, "POST", "/v1/questions", "agent", map[string]any{
		"run":      map[string]any{"id": "run-q", "agent": "trip-planner"},
		"id":       "q1",
		"question": map[string]any{"text": "Which city should the <b>offsite</b> be in?"},
	})
	var q struct {
		EventID string `json:"event_id"`
		Status  string `json:"status"`
	}
	r.decode(t, &q)
	if r.status != http.StatusOK || q.EventID == "" {
		t.Fatalf("question: %d %s", r.status, r.body)
	}
	alice := e.signIn(t, "alice")
	page := string(alice.get("/approvals/" + q.EventID).body)
	if !strings.Contains(page, `id="answer-form"`) || !strings.Contains(page, `id="decline-form"`) ||
		strings.Contains(page, `id="approve-form"`) || !strings.Contains(page, "Which city should the &lt;b&gt;offsite&lt;/b&gt; be in?") {
		t.Fatalf("question page:\n%s", page)
	}
	if r := alice.followDecision(q.EventID, alice.decide(q.EventID, url.Values{"decision": {"answer"}, "answer": {"Lisbon"}})); r.status != http.StatusOK {
		t.Fatalf("answer: %d\n%s", r.status, r.body)
	}
	rec := e.record(t, q.EventID)
	if rec.Status != contracts.StatusAnswered || rec.Outcome == nil || string(rec.Outcome.Arguments) != `{"text":"Lisbon"}` {
		t.Fatalf("after the answer: %s %+v", rec.Status, rec.Outcome)
	}
}

// A decision in the inbox is answered with a redirect to the request's page
// (POST/redirect/GET): that page shows the result once, and reloading it
// votes nothing.
func TestInboxDecideRedirectsToTheRequestPage(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	id := e.refund(t, "run-prg", "Globex", "", 120)
	alice := e.signIn(t, "alice")

	r := alice.decide(id, url.Values{"decision": {"approve"}, "comment": {"checked"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/approvals/"+id {
		t.Fatalf("approve: %d, Location %q; want 303 to the request's page\n%s", r.status, r.header.Get("Location"), r.body)
	}
	page := alice.get(r.header.Get("Location"))
	body := string(page.body)
	if page.status != http.StatusOK || !strings.Contains(body, `id="result">Your approval was counted.</p>`) || strings.Contains(body, "counted. Approved") ||
		!strings.Contains(body, `id="outcome"`) {
		t.Fatalf("the request's page after the redirect: %d\n%s", page.status, body)
	}
	// The result is shown once; the page itself stays the request's page.
	again := alice.get("/approvals/" + id)
	if again.status != http.StatusOK || strings.Contains(string(again.body), `id="result"`) || !strings.Contains(string(again.body), `id="outcome"`) {
		t.Fatalf("reloaded page: %d\n%s", again.status, again.body)
	}
	if rec := e.record(t, id); len(rec.Votes) != 1 || len(rec.RefusedVotes) != 0 {
		t.Fatalf("votes after the reloads: %+v / %+v", rec.Votes, rec.RefusedVotes)
	}

	// An error is shown at once, on the form, with what was typed.
	id2 := e.refund(t, "run-prg-2", "Globex", "", 130)
	r = alice.decide(id2, url.Values{"decision": {"respond"}})
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "Write the response") {
		t.Fatalf("respond without text: %d\n%s", r.status, r.body)
	}
}

// TestFaviconAndPlainRefusals: /favicon.ico leads to the inbox's icon, and a
// form sent without a session is refused with a page that says, in one
// sentence that starts with a capital, what to do.
func TestFaviconAndPlainRefusals(t *testing.T) {
	e := setup(t)
	c := newWebClient(t, e.url)
	r := c.get("/favicon.ico")
	if r.status != http.StatusMovedPermanently || r.header.Get("Location") != "/assets/favicon.svg" {
		t.Fatalf("/favicon.ico: %d %v", r.status, r.header)
	}
	r = c.get("/assets/favicon.svg")
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "image/svg+xml") {
		t.Fatalf("/assets/favicon.svg: %d %v", r.status, r.header)
	}
	r = c.post("/decide", url.Values{"decision": {"approve"}})
	body := string(r.body)
	if r.status != http.StatusForbidden || !strings.Contains(body, "Sign in first, then send the form again.") ||
		!strings.Contains(body, "<html") {
		t.Fatalf("a form without a session: %d %s", r.status, body)
	}
}
