package inbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/inbox"
	"github.com/countersign/countersign/test/oidcop"
)

// liveDirectory is a directory that a test changes while the inbox runs,
// as serve's watcher does when the file changes.
type liveDirectory struct {
	d atomic.Pointer[directory.Directory]
}

func (l *liveDirectory) Current() *directory.Directory { return l.d.Load() }

func (l *liveDirectory) set(t *testing.T, src string) {
	t.Helper()
	d, err := directory.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	l.d.Store(d)
}

// oidcDirectory: alice signs in by her provider subject or her email;
// dave has groups and tenants; erin has only an agent's token.
const oidcDirectory = `
users:
  - {id: alice, email: alice@example.com, oidc_subject: sub-alice}
  - {id: dave, email: dave@example.com, oidc_subject: sub-dave, groups: [finance, sre], tenants: [acme, globex]}
  - id: erin
    oidc_subject: sub-erin
    tokens: [{sha256: "` + "0000000000000000000000000000000000000000000000000000000000000001" + `", roles: [agent]}]
`

// oidcEnv is the inbox with sign-in through a real OpenID provider.
type oidcEnv struct {
	*env
	op    *oidcop.Provider
	dir   *liveDirectory
	reg   *prometheus.Registry
	shift atomic.Int64 // how far the inbox's clock is ahead, in nanoseconds
}

func (o *oidcEnv) now() time.Time { return time.Now().Add(time.Duration(o.shift.Load())) }

// setupOIDC starts the inbox with OIDC sign-in matched by match, the
// provider's groups and tenants claims read when claims is true.
func setupOIDC(t *testing.T, match string, claims bool) *oidcEnv {
	t.Helper()
	return setupOIDCWith(t, match, claims, nil)
}

// setupOIDCWith is setupOIDC with more of the inbox's OIDC configuration
// set by more, when not nil.
func setupOIDCWith(t *testing.T, match string, claims bool, more func(*inbox.OIDC)) *oidcEnv {
	t.Helper()
	o := &oidcEnv{env: setup(t), op: oidcop.Start(t), dir: &liveDirectory{}, reg: prometheus.NewRegistry()}
	o.dir.set(t, oidcDirectory)
	for _, p := range []oidcop.Person{
		{Subject: "sub-alice", Username: "alice", Password: "alice-pw", Email: "alice@example.com", EmailVerified: true},
		{Subject: "sub-dave", Username: "dave", Password: "dave-pw", Email: "dave@example.com", EmailVerified: true, Groups: []string{"sre"}, Tenants: []string{"acme", "initech"}},
		{Subject: "sub-erin", Username: "erin", Password: "erin-pw", Email: "erin@example.com", EmailVerified: true},
		{Subject: "sub-mallory", Username: "mallory", Password: "mallory-pw", Email: "mallory@example.com", EmailVerified: true},
		{Subject: "sub-alias", Username: "alias", Password: "alias-pw", Email: "alice@example.com", EmailVerified: false},
	} {
		o.op.Add(p)
	}
	cfg := o.cfg
	cfg.Registerer, cfg.Gatherer = o.reg, o.reg
	cfg.Directory = o.dir
	cfg.Now = o.now
	ctx := context.Background()
	s, err := api.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	base := "http://" + hs.Listener.Addr().String()
	oc := &inbox.OIDC{
		Issuer: o.op.Issuer, ClientID: o.op.ClientID, ClientSecret: o.op.ClientSecret, RedirectURL: base + "/oidc/callback",
		Scopes: []string{"openid", "email", "offline_access"}, Match: match, Name: "Example ID", People: o.dir,
	}
	if claims {
		oc.GroupsClaim, oc.TenantsClaim = oidcop.GroupsClaim, oidcop.TenantsClaim
	}
	if more != nil {
		more(oc)
	}
	if _, err := inbox.New(ctx, inbox.Config{API: s, JS: cfg.JS, Registerer: o.reg, Now: o.now, OIDC: oc}); err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = s.Handler()
	hs.Start()
	t.Cleanup(func() { _ = s.Close(); hs.CloseClientConnections(); hs.Close() })
	o.url = base
	return o
}

// authURL starts a sign-in in w and returns the provider's authorization
// URL the inbox sent the browser to.
func (o *oidcEnv) authURL(t *testing.T, w *webClient) string {
	t.Helper()
	r := w.get("/oidc/start?next=/history")
	loc := r.header.Get("Location")
	if r.status != http.StatusSeeOther || !strings.HasPrefix(loc, o.op.Issuer+"/") {
		t.Fatalf("start: %d %q, want a redirect to the provider", r.status, loc)
	}
	u := mustURL(t, loc)
	q := u.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		t.Fatalf("authorization request without PKCE S256, nonce or state: %s", loc)
	}
	return loc
}

// atProvider signs in at the provider's login page from the authorization
// URL auth, in w's cookie jar, and returns the inbox callback URL the
// provider redirects to.
func (o *oidcEnv) atProvider(t *testing.T, w *webClient, auth, username, password string) string {
	t.Helper()
	next := auth
	for range 10 {
		if strings.HasPrefix(next, o.url+"/") {
			return next
		}
		req, _ := http.NewRequest("GET", next, nil)
		u := mustURL(t, next)
		if u.Path == "/login/username" {
			form := url.Values{"id": {u.Query().Get("authRequestID")}, "username": {username}, "password": {password}}
			req, _ = http.NewRequest("POST", next, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		r := w.do(req)
		loc := r.header.Get("Location")
		if r.status/100 != 3 || loc == "" {
			t.Fatalf("at the provider, %s: %d %s", next, r.status, r.body)
		}
		ref, err := u.Parse(loc)
		if err != nil {
			t.Fatal(err)
		}
		next = ref.String()
	}
	t.Fatalf("the provider did not send the browser back to the inbox")
	return ""
}

// callback opens the provider's redirect back to the inbox in w.
func (o *oidcEnv) callback(t *testing.T, w *webClient, cb string) response {
	t.Helper()
	return w.get(strings.TrimPrefix(cb, o.url))
}

// oidcSignIn signs username in through the provider and returns the web
// client with its session and CSRF token.
func (o *oidcEnv) oidcSignIn(t *testing.T, username, password string) *webClient {
	t.Helper()
	w := newWebClient(t, o.url)
	r := o.callback(t, w, o.atProvider(t, w, o.authURL(t, w), username, password))
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/history" {
		t.Fatalf("callback: %d %v\n%s", r.status, r.header, r.body)
	}
	page := w.get("/")
	m := csrfInput.FindSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		t.Fatalf("inbox after sign-in: %d %s", page.status, page.body)
	}
	w.csrf = string(m[1])
	return w
}

// sessionEntry reads the one session in the bucket.
func (o *oidcEnv) sessionEntry(t *testing.T) map[string]any {
	t.Helper()
	kv := sessionsBucket(t, o.env)
	keys := sessionKeys(t, kv)
	if len(keys) != 1 {
		t.Fatalf("sessions: %v, want one", keys)
	}
	e, err := kv.Get(context.Background(), keys[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// wantRefused expects a sign-in refused on the sign-in page with msg, and
// no session.
func (o *oidcEnv) wantRefused(t *testing.T, what string, r response, status int, msg string) {
	t.Helper()
	if r.status != status || !strings.Contains(string(r.body), msg) {
		t.Fatalf("%s: %d, want %d with %q\n%s", what, r.status, status, msg, r.body)
	}
	for _, c := range r.header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "countersign_session=") {
			t.Fatalf("%s: a session cookie was set: %s", what, c)
		}
	}
	if keys := sessionKeys(t, sessionsBucket(t, o.env)); len(keys) != 0 {
		t.Fatalf("%s: sessions were stored: %v", what, keys)
	}
}

// A person signs in through the provider, sees the inbox as the directory
// person their subject names, votes as that person via the web, and
// signs out, which continues at the provider's end_session endpoint.
func TestOIDCSignInVoteAndSignOut(t *testing.T) {
	o := setupOIDC(t, inbox.MatchSubject, false)
	o.applyInboxPolicy(t)
	id := o.refund(t, "run-oidc", "Globex", "", 120)

	login := newWebClient(t, o.url).get("/login")
	if !strings.Contains(string(login.body), `id="sign-in-oidc"`) || !strings.Contains(string(login.body), "Sign in with Example ID") || !strings.Contains(string(login.body), `id="token"`) {
		t.Fatalf("the sign-in page offers no provider, or no token form:\n%s", login.body)
	}
	alice := o.oidcSignIn(t, "alice", "alice-pw")
	e := o.sessionEntry(t)
	if e["method"] != "oidc" || e["person_id"] != "alice" || e["token_sha256"] != nil {
		t.Fatalf("session entry: %v", e)
	}
	g, _ := e["oidc"].(map[string]any)
	if g["subject"] != "sub-alice" || g["refresh_token"] == "" || g["id_token"] == "" {
		t.Fatalf("session's grant: %v", g)
	}
	if r := alice.followDecision(id, alice.decide(id, url.Values{"decision": {"approve"}})); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	rec := o.record(t, id)
	if rec.Status != contracts.StatusApproved || rec.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaWeb}) {
		t.Fatalf("record: %+v", rec)
	}

	// The sign-out page sends the browser on to the provider's
	// end_session endpoint (a form may not redirect off the site).
	r := alice.post("/logout", url.Values{"csrf": {alice.csrf}})
	end, _ := strings.CutPrefix(r.header.Get("Refresh"), "0; url=")
	if r.status != http.StatusOK || !strings.HasPrefix(end, o.op.Issuer+"/") || !strings.Contains(string(r.body), `id="continue-sign-out"`) {
		t.Fatalf("sign-out: %d %v, want a page that continues to the provider's end_session", r.status, r.header)
	}
	q := mustURL(t, end).Query()
	if q.Get("id_token_hint") == "" || q.Get("post_logout_redirect_uri") != o.url+"/login" || q.Get("client_id") != o.op.ClientID {
		t.Fatalf("end_session request: %s", end)
	}
	// The provider accepts it and sends the browser back to the sign-in page.
	req, _ := http.NewRequest("GET", end, nil)
	if back := alice.do(req); back.status/100 != 3 || back.header.Get("Location") != o.url+"/login" {
		t.Fatalf("the provider's sign-out: %d %v %s", back.status, back.header, back.body)
	}
	wantSignInRedirect(t, "after sign-out", alice.get("/"))
	if keys := sessionKeys(t, sessionsBucket(t, o.env)); len(keys) != 0 {
		t.Fatalf("sessions left after sign-out: %v", keys)
	}
}

// The callback refuses what is not the sign-in this browser started:
// another state, an authorization request whose nonce was changed on its
// way to the provider, a callback in a browser that started nothing.
func TestOIDCCallbackRefusesForeignSignIns(t *testing.T) {
	o := setupOIDC(t, inbox.MatchSubject, false)

	t.Run("state", func(t *testing.T) {
		w := newWebClient(t, o.url)
		u := mustURL(t, o.authURL(t, w))
		q := u.Query()
		q.Set("state", "an-attacker-state")
		u.RawQuery = q.Encode()
		cb := o.atProvider(t, w, u.String(), "alice", "alice-pw")
		o.wantRefused(t, "state", o.callback(t, w, cb), http.StatusBadRequest, "not the one this browser started")
	})
	t.Run("nonce", func(t *testing.T) {
		w := newWebClient(t, o.url)
		u := mustURL(t, o.authURL(t, w))
		q := u.Query()
		q.Set("nonce", "an-attacker-nonce")
		u.RawQuery = q.Encode()
		cb := o.atProvider(t, w, u.String(), "alice", "alice-pw")
		o.wantRefused(t, "nonce", o.callback(t, w, cb), http.StatusForbidden, "not for this sign-in")
	})
	t.Run("another browser", func(t *testing.T) {
		w := newWebClient(t, o.url)
		cb := o.atProvider(t, w, o.authURL(t, w), "alice", "alice-pw")
		o.wantRefused(t, "callback in a browser that started nothing", o.callback(t, newWebClient(t, o.url), cb), http.StatusBadRequest, "not started here")
	})
	t.Run("code used twice", func(t *testing.T) {
		w := newWebClient(t, o.url)
		cb := o.atProvider(t, w, o.authURL(t, w), "alice", "alice-pw")
		start := w.c.Jar.Cookies(mustURL(t, o.url+"/oidc/"))
		if r := o.callback(t, w, cb); r.status != http.StatusSeeOther {
			t.Fatalf("first callback: %d %s", r.status, r.body)
		}
		_ = w.post("/logout", url.Values{"csrf": {o.csrfOf(t, w)}})
		// The same callback again, with the flow cookie put back.
		replay := newWebClient(t, o.url)
		replay.c.Jar.SetCookies(mustURL(t, o.url+"/oidc/"), start)
		o.wantRefused(t, "replayed code", o.callback(t, replay, cb), http.StatusForbidden, "refused to finish the sign-in")
	})
}

func (o *oidcEnv) csrfOf(t *testing.T, w *webClient) string {
	t.Helper()
	m := csrfInput.FindSubmatch(w.get("/").body)
	if m == nil {
		t.Fatal("no CSRF token on the inbox page")
	}
	return string(m[1])
}

// Only a person the directory knows signs in: by subject, someone the
// directory does not name is refused; by email, only an address the
// provider verified counts; a person whose tokens are an agent's has
// nothing to do in the inbox.
func TestOIDCSignInNeedsADirectoryPerson(t *testing.T) {
	t.Run("unknown subject", func(t *testing.T) {
		o := setupOIDC(t, inbox.MatchSubject, false)
		w := newWebClient(t, o.url)
		r := o.callback(t, w, o.atProvider(t, w, o.authURL(t, w), "mallory", "mallory-pw"))
		o.wantRefused(t, "mallory", r, http.StatusForbidden, "does not know the account")
	})
	t.Run("agent only", func(t *testing.T) {
		o := setupOIDC(t, inbox.MatchSubject, false)
		w := newWebClient(t, o.url)
		r := o.callback(t, w, o.atProvider(t, w, o.authURL(t, w), "erin", "erin-pw"))
		o.wantRefused(t, "erin", r, http.StatusForbidden, "nothing to do in the inbox")
	})
	t.Run("unverified email", func(t *testing.T) {
		o := setupOIDC(t, inbox.MatchEmail, false)
		w := newWebClient(t, o.url)
		// alias claims alice's address, which the provider has not verified.
		r := o.callback(t, w, o.atProvider(t, w, o.authURL(t, w), "alias", "alias-pw"))
		o.wantRefused(t, "unverified email", r, http.StatusForbidden, "did not vouch for your email address")
	})
	t.Run("verified email", func(t *testing.T) {
		o := setupOIDC(t, inbox.MatchEmail, false)
		o.oidcSignIn(t, "alice", "alice-pw")
		if e := o.sessionEntry(t); e["person_id"] != "alice" {
			t.Fatalf("session: %v", e)
		}
	})
}

// The provider's claims narrow what the directory gives and never add to
// it: dave's tenants are those both name; with no group of his left at
// the provider, he cannot sign in.
func TestOIDCClaimsOnlyNarrow(t *testing.T) {
	o := setupOIDC(t, inbox.MatchSubject, true)
	o.applyInboxPolicy(t)
	o.oidcSignIn(t, "dave", "dave-pw")
	e := o.sessionEntry(t)
	g, _ := e["oidc"].(map[string]any)
	if tn, _ := json.Marshal(g["tenants"]); string(tn) != `["acme","initech"]` {
		t.Fatalf("stored tenants claim: %s", tn)
	}
	// Alice has neither claim from the provider: the configuration asks
	// for them, so she is refused rather than given no limit.
	w := newWebClient(t, o.url)
	r := o.callback(t, w, o.atProvider(t, w, o.authURL(t, w), "alice", "alice-pw"))
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "none of your Countersign tenants") {
		t.Fatalf("alice without a tenants claim: %d %s", r.status, r.body)
	}

	o.op.Add(oidcop.Person{Subject: "sub-dave", Username: "dave", Password: "dave-pw", Email: "dave@example.com", EmailVerified: true, Groups: []string{"marketing"}, Tenants: []string{"acme"}})
	w = newWebClient(t, o.url)
	r = o.callback(t, w, o.atProvider(t, w, o.authURL(t, w), "dave", "dave-pw"))
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "no longer lists you in any of your Countersign groups") {
		t.Fatalf("dave outside his groups at the provider: %d %s", r.status, r.body)
	}
}

// A person removed from the directory while signed in loses the session
// at once: the next page asks to sign in, and a vote is refused.
func TestOIDCPersonRemovedFromTheDirectoryMidSession(t *testing.T) {
	o := setupOIDC(t, inbox.MatchSubject, false)
	o.applyInboxPolicy(t)
	id := o.refund(t, "run-removed", "Globex", "", 120)
	alice := o.oidcSignIn(t, "alice", "alice-pw")

	o.dir.set(t, strings.Replace(oidcDirectory, "  - {id: alice, email: alice@example.com, oidc_subject: sub-alice}\n", "", 1))
	r := alice.decide(id, url.Values{"decision": {"approve"}})
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "Sign in first") {
		t.Fatalf("vote after removal: %d %s", r.status, r.body)
	}
	wantSignInRedirect(t, "inbox after removal", alice.get("/"))
	if rec := o.record(t, id); rec.Status != contracts.StatusPending || len(rec.Votes) != 0 {
		t.Fatalf("record: %+v", rec)
	}
	// Nor can she sign in again.
	w := newWebClient(t, o.url)
	o.wantRefused(t, "sign-in after removal", o.callback(t, w, o.atProvider(t, w, o.authURL(t, w), "alice", "alice-pw")), http.StatusForbidden, "does not know the account")
}

// A session lasts as long as the provider's ID token unless the provider
// refreshes it: a refresh it grants extends the session (with a new
// refresh token); once the person is removed at the provider, the refresh
// is refused and the session ends.
func TestOIDCSessionLivesWhileTheProviderRefreshesIt(t *testing.T) {
	o := setupOIDC(t, inbox.MatchSubject, false)
	alice := o.oidcSignIn(t, "alice", "alice-pw")
	first, _ := o.sessionEntry(t)["oidc"].(map[string]any)

	o.shift.Add(int64(61 * time.Minute)) // past the ID token's hour
	if r := alice.get("/"); r.status != http.StatusOK {
		t.Fatalf("inbox after a refresh: %d %s", r.status, r.body)
	}
	second, _ := o.sessionEntry(t)["oidc"].(map[string]any)
	if second["refresh_token"] == first["refresh_token"] || second["id_token"] == first["id_token"] || second["expires_at"] == first["expires_at"] {
		t.Fatalf("the refresh changed nothing: %v then %v", first, second)
	}

	o.op.Remove("sub-alice")
	if r := alice.get("/"); r.status != http.StatusOK {
		t.Fatalf("within the refreshed token's lifetime: %d", r.status)
	}
	o.shift.Add(int64(61 * time.Minute))
	wantSignInRedirect(t, "after the provider refused the refresh", alice.get("/"))
	if keys := sessionKeys(t, sessionsBucket(t, o.env)); len(keys) != 0 {
		t.Fatalf("the refused session is still stored: %v", keys)
	}
}

// Without a refresh token (no offline_access), a session ends with its ID
// token.
func TestOIDCSessionWithoutRefreshEndsWithItsIDToken(t *testing.T) {
	o := setupOIDC(t, inbox.MatchSubject, false)
	w := newWebClient(t, o.url)
	u := mustURL(t, o.authURL(t, w))
	q := u.Query()
	q.Set("scope", "openid email")
	u.RawQuery = q.Encode()
	if r := o.callback(t, w, o.atProvider(t, w, u.String(), "alice", "alice-pw")); r.status != http.StatusSeeOther {
		t.Fatalf("callback: %d %s", r.status, r.body)
	}
	o.shift.Add(int64(59 * time.Minute))
	if r := w.get("/"); r.status != http.StatusOK {
		t.Fatalf("within the ID token's hour: %d", r.status)
	}
	o.shift.Add(int64(2 * time.Minute))
	wantSignInRedirect(t, "after the ID token's hour", w.get("/"))
}

// With only: true the token form is gone, and a posted token is refused.
func TestOIDCOnlyHidesTheTokenForm(t *testing.T) {
	e := setup(t)
	dir := &liveDirectory{}
	dir.set(t, oidcDirectory)
	cfg := e.cfg
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	s, err := api.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	oc := &inbox.OIDC{Issuer: "https://id.example.com", ClientID: "c", ClientSecret: "s", RedirectURL: "https://inbox.example.com/oidc/callback", People: dir, Only: true}
	if _, err := inbox.New(context.Background(), inbox.Config{API: s, JS: cfg.JS, Registerer: reg, OIDC: oc}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { _ = s.Close(); hs.Close() })
	w := newWebClient(t, hs.URL)
	page := w.get("/login")
	if strings.Contains(string(page.body), `id="token"`) || !strings.Contains(string(page.body), "Sign in with single sign-on") {
		t.Fatalf("sign-in page with only: true:\n%s", page.body)
	}
	// The form's CSRF token is the login cookie's: a post as the form would send it.
	var csrf string
	for _, c := range w.c.Jar.Cookies(mustURL(t, hs.URL+"/login")) {
		if c.Name == "countersign_login" {
			csrf = c.Value
		}
	}
	r := w.post("/login", url.Values{"token": {e.tokens["alice"]}, "csrf": {csrf}})
	if r.status != http.StatusForbidden || strings.Contains(strings.Join(r.header.Values("Set-Cookie"), ";"), "countersign_session=") {
		t.Fatalf("token sign-in with only: true: %d %v", r.status, r.header)
	}
}

// A configuration with mistakes is refused with every field named.
func TestOIDCConfigIsValidated(t *testing.T) {
	e := setup(t)
	s, err := api.New(context.Background(), func() api.Config {
		c := e.cfg
		r := prometheus.NewRegistry()
		c.Registerer, c.Gatherer = r, r
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, err = inbox.New(context.Background(), inbox.Config{API: s, JS: e.cfg.JS, OIDC: &inbox.OIDC{
		Issuer: "http://id.example.com", RedirectURL: "https://inbox.example.com/callback", Scopes: []string{"email"}, Match: "name",
	}})
	for _, want := range []string{"OIDC.Issuer", "must be https", "OIDC.ClientID", "OIDC.ClientSecret", "OIDC.RedirectURL", "/oidc/callback", `OIDC.Scopes must include "openid"`, "OIDC.Match", "OIDC.People"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
}
