package inbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"golang.org/x/sync/singleflight"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/api/oversight"
)

const (
	// sessionCookie names the inbox's session cookie.
	sessionCookie = "countersign_session"
	// sessionTTL is how long a session lasts after sign-in.
	sessionTTL = events.SessionsTTL
	// csrfField is the form field (and csrfHeader the header) that carries
	// a session's CSRF token on every POST.
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
	// maxFormBytes bounds a form post.
	maxFormBytes = 1 << 20
	// sessionStoreTimeout bounds one read of the session store, so that a
	// bus outage answers 503 instead of holding the page open.
	sessionStoreTimeout = 5 * time.Second
	// sessionIDLen is the length of a session id: 32 random bytes, base64url.
	sessionIDLen = 43
)

// contentSecurityPolicy allows the inbox's own scripts, styles and images
// only: no inline code, no framing, forms only to this origin.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"

// How a session was signed in.
const (
	// methodToken: with an API token (entries from before methods have
	// none, and are token sessions).
	methodToken = "token"
	// methodOIDC: through the OpenID Connect provider.
	methodOIDC = "oidc"
)

// session is one signed-in person.
type session struct {
	id      string
	p       api.Principal
	csrf    string
	expires time.Time
	// method is how the session was signed in: methodToken or methodOIDC.
	method string
	// idToken is an OIDC session's last ID token (the provider's sign-out
	// hint).
	idToken string
}

// sessionEntry is a session's value in the hitl_sessions bucket.
type sessionEntry struct {
	// Method is methodToken (or empty) or methodOIDC.
	Method string `json:"method,omitempty"`
	// TokenSHA256 is the hex SHA-256 of the token a token session signed
	// in with.
	TokenSHA256 string `json:"token_sha256,omitempty"`
	// PersonID is the directory user an OIDC session signed in as.
	PersonID string `json:"person_id,omitempty"`
	// OIDC is what an OIDC session keeps of its sign-in.
	OIDC      *oidcGrant `json:"oidc,omitempty"`
	CSRF      string     `json:"csrf"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
}

// sessionStore keeps sessions in the hitl_sessions bucket.
type sessionStore struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream // writes the bucket's updates (events.UpdateKey)
	now func() time.Time
	// resolve finds the principal of a token hash now, or nil.
	resolve func(sum [sha256.Size]byte) (api.Principal, bool)
	// oidc re-resolves and refreshes OIDC sessions; nil when OIDC sign-in
	// is not configured (and such sessions end).
	oidc *oidcSignIn
	// refreshing makes one refresh at a time of each session in this
	// process (a provider that rotates refresh tokens refuses a second).
	refreshing singleflight.Group
}

func randomID() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// sessionKey is the bucket key of a session id.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// create starts a session for the principal of the token with hash sum.
func (st *sessionStore) create(ctx context.Context, sum [sha256.Size]byte, p api.Principal) (*session, error) {
	return st.store(ctx, sessionEntry{Method: methodToken, TokenSHA256: hex.EncodeToString(sum[:])}, p)
}

// createOIDC starts a session for directory user personID, signed in
// through the OpenID Connect provider with grant g.
func (st *sessionStore) createOIDC(ctx context.Context, personID string, g *oidcGrant, p api.Principal) (*session, error) {
	return st.store(ctx, sessionEntry{Method: methodOIDC, PersonID: personID, OIDC: g}, p)
}

// store completes e with a new id, CSRF token and lifetime, and stores it.
func (st *sessionStore) store(ctx context.Context, e sessionEntry, p api.Principal) (*session, error) {
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	if e.CSRF, err = randomID(); err != nil {
		return nil, err
	}
	now := st.now()
	e.CreatedAt, e.ExpiresAt = now.UTC(), now.Add(sessionTTL).UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if _, err := st.kv.Create(ctx, sessionKey(id), b); err != nil {
		return nil, fmt.Errorf("store the session: %w", err)
	}
	return sessionOf(id, &e, p), nil
}

func sessionOf(id string, e *sessionEntry, p api.Principal) *session {
	s := &session{id: id, p: p, csrf: e.CSRF, expires: e.ExpiresAt, method: methodToken}
	if e.Method == methodOIDC {
		s.method, s.idToken = methodOIDC, e.OIDC.IDToken
	}
	return s
}

// get returns the live session with id; nil when there is none, it has
// expired or its token is no longer valid. An error means the store could
// not be read.
func (st *sessionStore) get(ctx context.Context, id string) (*session, error) {
	if len(id) != sessionIDLen {
		return nil, nil
	}
	entry, err := st.kv.Get(ctx, sessionKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var e sessionEntry
	if err := json.Unmarshal(entry.Value(), &e); err != nil || !st.now().Before(e.ExpiresAt) {
		st.forget(ctx, id)
		return nil, nil
	}
	switch e.Method {
	case "", methodToken:
		raw, herr := hex.DecodeString(e.TokenSHA256)
		if herr != nil || len(raw) != sha256.Size {
			st.forget(ctx, id)
			return nil, nil
		}
		p, ok := st.resolve([sha256.Size]byte(raw))
		if !ok {
			st.forget(ctx, id)
			return nil, nil
		}
		return sessionOf(id, &e, p), nil
	case methodOIDC:
		return st.getOIDC(ctx, id, &e)
	}
	st.forget(ctx, id)
	return nil, nil
}

// getOIDC returns the live OIDC session with id and entry e. Its person is
// found again in the live directory, by the subject or verified email it
// signed in with, on every request: a person removed from the directory
// has no session from that moment. Once the provider's ID token has run
// its lifetime, the provider must refresh it; a provider that refuses
// ends the session, one that cannot be reached leaves it unusable until it
// answers.
func (st *sessionStore) getOIDC(ctx context.Context, id string, e *sessionEntry) (*session, error) {
	if st.oidc == nil || e.OIDC == nil {
		st.forget(ctx, id)
		return nil, nil
	}
	if _, ok := st.oidc.resolve(e.PersonID, e.OIDC); !ok {
		st.forget(ctx, id)
		return nil, nil
	}
	if !st.now().Before(e.OIDC.ExpiresAt) {
		fresh, err := st.refresh(ctx, id)
		if err != nil || fresh == nil {
			return nil, err
		}
		e = fresh
	}
	p, ok := st.oidc.resolve(e.PersonID, e.OIDC)
	if !ok {
		st.forget(ctx, id)
		return nil, nil
	}
	return sessionOf(id, e, p), nil
}

// refresh extends the OIDC session with id at the provider, once at a
// time per session in this process, and writes the new grant only over
// the entry it read (a compare-and-set on its revision). It answers the
// session's entry as refreshed, here or by another request or replica;
// nil when the session ended.
func (st *sessionStore) refresh(ctx context.Context, id string) (*sessionEntry, error) {
	key := sessionKey(id)
	v, err, _ := st.refreshing.Do(key, func() (any, error) {
		// Detached from the request that asked: the result serves every
		// request waiting here, and is stored either way.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*providerTimeout)
		defer cancel()
		entry, err := st.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return (*sessionEntry)(nil), nil
		}
		if err != nil {
			return nil, err
		}
		var e sessionEntry
		if json.Unmarshal(entry.Value(), &e) != nil || e.OIDC == nil {
			return (*sessionEntry)(nil), nil
		}
		if st.now().Before(e.OIDC.ExpiresAt) {
			return &e, nil // refreshed meanwhile
		}
		g, err := st.oidc.refresh(ctx, e.OIDC)
		var rf *refusal
		if errors.As(err, &rf) {
			// Another replica may have refreshed with the same token
			// while this one asked: its entry stands.
			if again, gerr := st.kv.Get(ctx, key); gerr == nil && again.Revision() != entry.Revision() {
				var e2 sessionEntry
				if json.Unmarshal(again.Value(), &e2) == nil && e2.OIDC != nil && st.now().Before(e2.OIDC.ExpiresAt) {
					return &e2, nil
				}
			}
			st.forget(ctx, id)
			return (*sessionEntry)(nil), nil
		}
		if err != nil {
			return nil, err
		}
		e.OIDC = g
		b, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		if _, err := events.UpdateKey(ctx, st.js, contracts.BucketSessions, key, b, entry.Revision()); err != nil {
			// Changed or deleted meanwhile (a sign-out): read what is there.
			again, gerr := st.kv.Get(ctx, key)
			var e2 sessionEntry
			if gerr != nil || json.Unmarshal(again.Value(), &e2) != nil || e2.OIDC == nil || !st.now().Before(e2.OIDC.ExpiresAt) {
				return (*sessionEntry)(nil), nil
			}
			return &e2, nil
		}
		return &e, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*sessionEntry), nil
}

// forget deletes a session that can no longer be used, as a courtesy: it
// is refused either way, and the bucket's TTL removes it if this fails.
func (st *sessionStore) forget(ctx context.Context, id string) {
	_ = st.drop(ctx, id)
}

// drop deletes a session that can no longer be used.
func (st *sessionStore) drop(ctx context.Context, id string) error {
	if err := st.kv.Purge(ctx, sessionKey(id)); err != nil {
		return fmt.Errorf("drop the session: %w", err)
	}
	return nil
}

// Backend is what the inbox needs of the API (an *api.Server has it): the
// API's authentication, records, timelines, live feed and vote path, and
// its server to be served on.
type Backend interface {
	Handle(pattern string, h http.Handler)
	AuthenticateSum(sum [sha256.Size]byte) (api.Principal, bool)
	// SetBearerVerifier hands the API the OIDC provider's tokens to judge.
	SetBearerVerifier(v api.BearerVerifier)
	Record(ctx context.Context, p api.Principal, id string, wait time.Duration) (*contracts.Record, *api.Error)
	Records(ctx context.Context, p api.Principal, q api.Query) ([]*contracts.Record, *api.Error)
	Timeline(ctx context.Context, p api.Principal, id string) ([]api.TimelineEvent, error)
	RecordOpened(ctx context.Context, p api.Principal, rec *contracts.Record)
	Follow(w http.ResponseWriter, r *http.Request, p api.Principal, preamble string, render func(context.Context, api.Change) ([]byte, bool))
	AwaitRecord(ctx context.Context, id string, wait time.Duration)
	Settle(ctx context.Context) error
	Resolver() notifier.Resolver
	Oversight(ctx context.Context, p api.Principal, q api.OversightQuery) (*oversight.Report, *api.Error)
	Grants(ctx context.Context, p *api.Principal, status, agent, tool string) []api.GrantView
	RevokeGrant(ctx context.Context, p *api.Principal, id string) (api.GrantView, *api.Error)
	PasskeyBackend
	PushBackend
}

// Config wires an Inbox.
type Config struct {
	// API serves the inbox's pages and answers its questions.
	API Backend
	// JS opens the hitl_sessions bucket (created by countersign provision,
	// or by serve with provisioning on).
	JS jetstream.JetStream
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Registerer receives the inbox's metrics (default: a private registry).
	Registerer prometheus.Registerer
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OIDC, when set, lets people sign in through an OpenID Connect
	// provider besides (or, with OIDC.Only, instead of) their API token.
	OIDC *OIDC
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OIDC != nil {
		o := *c.OIDC
		o.setDefaults()
		c.OIDC = &o
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.API == nil {
		errs = append(errs, errors.New("inbox: Config.API is required"))
	}
	if c.JS == nil {
		errs = append(errs, errors.New("inbox: Config.JS is required"))
	}
	if c.OIDC != nil {
		errs = append(errs, c.OIDC.validate()...)
	}
	return errors.Join(errs...)
}

// Inbox is the web inbox. New registers its pages on the API's server.
type Inbox struct {
	api      Backend
	log      *slog.Logger
	now      func() time.Time
	sessions *sessionStore
	// oidc is the OpenID Connect sign-in; nil when not configured.
	oidc   *oidcSignIn
	logins *prometheus.CounterVec
	assets http.Handler
}

// New opens the sessions bucket and serves the inbox's pages (/, /history,
// /oversight, /approvals/{event_id}, /login, /logout, /inbox/events, /assets/,
// and /oidc/start and /oidc/callback with cfg.OIDC) on cfg.API.
func New(ctx context.Context, cfg Config) (*Inbox, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := cfg.JS.KeyValue(ctx, contracts.BucketSessions)
	if err != nil {
		return nil, fmt.Errorf("inbox: open bucket %s (created by countersign provision, or by serve with provisioning on): %w", contracts.BucketSessions, err)
	}
	in := &Inbox{api: cfg.API, log: cfg.Logger, now: cfg.Now}
	in.sessions = &sessionStore{kv: kv, js: cfg.JS, now: cfg.Now, resolve: cfg.API.AuthenticateSum}
	if cfg.OIDC != nil {
		in.oidc = &oidcSignIn{cfg: *cfg.OIDC, now: cfg.Now}
		in.sessions.oidc = in.oidc
		cfg.API.SetBearerVerifier(in.bearerTokens())
	}
	in.logins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_inbox_logins_total",
		Help: "Sign-ins to the web inbox by result: with a token ok, invalid_token, invalid_csrf (the form was not the sign-in page's), token_disabled (sign-in is through the identity provider only); through the identity provider oidc_ok, oidc_unknown_person, oidc_email_unverified, oidc_state_mismatch, oidc_nonce_mismatch, oidc_unavailable and the other oidc_ refusals.",
	}, []string{"result"})
	if err := cfg.Registerer.Register(in.logins); err != nil {
		return nil, fmt.Errorf("inbox: register metrics: %w", err)
	}
	sub, err := fs.Sub(webFS, "web/assets")
	if err != nil {
		return nil, err
	}
	in.assets = http.StripPrefix("/assets/", http.FileServerFS(sub))
	in.register()
	return in, nil
}

// register serves the inbox's routes on the API's server.
func (in *Inbox) register() {
	mux := in.api
	mux.Handle("GET /{$}", in.page(in.getList))
	mux.Handle("GET /history", in.page(in.getHistory))
	mux.Handle("GET /oversight", in.page(in.getOversight))
	mux.Handle("GET /approvals/{event_id}", in.page(in.getDetail))
	mux.Handle("POST /approvals/{event_id}/decide", in.page(in.postDecide))
	mux.Handle("GET /runs/{run_id}", in.page(in.getRun))
	mux.Handle("POST /decide", in.page(in.postBatch))
	mux.Handle("GET /grants", in.page(in.getGrants))
	mux.Handle("POST /grants/{grant_id}/revoke", in.page(in.postRevokeGrant))
	in.registerPasskeys(mux)
	in.registerDevices(mux)
	in.registerApp(mux)
	mux.Handle("GET /inbox/events", in.secure(in.getEvents))
	mux.Handle("GET /login", in.secure(in.getLogin))
	mux.Handle("POST /login", in.secure(in.postLogin))
	mux.Handle("POST /logout", in.page(in.postLogout))
	if in.oidc != nil {
		mux.Handle("GET "+oidcStartPath, in.secure(in.getOIDCStart))
		mux.Handle("GET "+oidcCallbackPath, in.secure(in.getOIDCCallback))
		if in.oidc.cfg.CLIClientID != "" {
			mux.Handle("GET "+LoginPath, in.secure(in.getLoginInfo))
		}
	}
	// Browsers ask for /favicon.ico whatever the page names: the same icon.
	mux.Handle("GET /favicon.ico", in.secure(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/assets/favicon.svg", http.StatusMovedPermanently)
	}))
	mux.Handle("GET /assets/", in.secure(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		in.assets.ServeHTTP(w, r)
	}))
}

// secure sets the inbox's security headers on every answer.
func (in *Inbox) secure(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		h(w, r)
	}
}

// sessionOf returns the request's live session, or nil. An error means
// the session store could not be read.
func (in *Inbox) sessionOf(r *http.Request) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), sessionStoreTimeout)
	defer cancel()
	sess, err := in.sessions.get(ctx, c.Value)
	if errors.Is(err, errProvider) {
		in.log.Error("inbox session: the identity provider cannot be reached to refresh it", "err", err)
	} else if err != nil {
		in.log.Error("inbox session store unavailable", "err", err)
	}
	return sess, err
}

// storeUnavailable answers a request the session store could not serve.
func storeUnavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "2")
	http.Error(w, "the inbox cannot reach its session store right now; try again in a moment", http.StatusServiceUnavailable)
}

// sessionUnavailable answers a request whose session could not be read:
// the store, or the identity provider that must renew it, is away.
func sessionUnavailable(w http.ResponseWriter, err error) {
	if errors.Is(err, errProvider) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "your session needs the identity provider, which cannot be reached right now; try again in a moment", http.StatusServiceUnavailable)
		return
	}
	storeUnavailable(w)
}

// pageHandler serves a page for a signed-in person.
type pageHandler func(w http.ResponseWriter, r *http.Request, sess *session)

// page wraps h with the security headers and the session check: a page
// request without a session goes to the sign-in form; a POST must carry
// the session's CSRF token.
func (in *Inbox) page(h pageHandler) http.HandlerFunc {
	return in.secure(func(w http.ResponseWriter, r *http.Request) {
		sess, err := in.sessionOf(r)
		if err != nil {
			sessionUnavailable(w, err)
			return
		}
		if sess == nil {
			if r.Method != http.MethodGet {
				in.message(w, http.StatusForbidden, nil, "Sign in first, then send the form again.")
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil {
				in.message(w, http.StatusBadRequest, sess, "The form could not be read. Reload the page and try again.")
				return
			}
			if !validCSRF(sess, r) {
				in.log.Warn("inbox post without a valid CSRF token", "path", r.URL.Path, "subject", sess.p.Subject)
				in.message(w, http.StatusForbidden, sess, "The form is out of date or was not sent by the inbox. Reload the page and try again.")
				return
			}
		}
		api.LogCaller(w, sess.p.Name)
		h(w, r, sess)
	})
}

// validCSRF compares the posted CSRF token with the session's in constant time.
func validCSRF(sess *session, r *http.Request) bool {
	got := r.PostForm.Get(csrfField)
	if got == "" {
		got = r.Header.Get(csrfHeader)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

// overTLS reports whether the request reached us, or the proxy in front, over TLS.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// localPath returns next when it is a path on this server, else "/". A
// browser drops tabs and line breaks from a URL and reads a backslash as a
// slash, so "/\t/evil.example" or "/\\evil.example" would leave the site:
// control characters and backslashes anywhere refuse it, as does anything
// that parses with a scheme or a host.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return "/"
	}
	for _, c := range next {
		if c < 0x20 || c == 0x7f || c == '\\' || unicode.IsSpace(c) {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return next
}

func (in *Inbox) getLogin(w http.ResponseWriter, r *http.Request) {
	if sess, err := in.sessionOf(r); err == nil && sess != nil {
		http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	in.renderLogin(w, r, http.StatusOK, localPath(r.URL.Query().Get("next")), "")
}

// The sign-in form carries a CSRF token too (login CSRF: another site must
// not sign a visitor in as the attacker, whose inbox would then collect
// what the visitor does). Before there is a session the token is a
// double-submit one: GET /login sets it in a cookie only this site can
// set (HttpOnly, SameSite=Strict, Path=/login) and in the form, and POST
// /login signs in only when the two agree.
const (
	loginCookie = "countersign_login"
	loginTTL    = time.Hour
)

// renderLogin renders the sign-in form with the login CSRF token, the
// cookie's when the request has a well-formed one, else a new one.
func (in *Inbox) renderLogin(w http.ResponseWriter, r *http.Request, status int, next, errMsg string) {
	token := ""
	if c, err := r.Cookie(loginCookie); err == nil && len(c.Value) == sessionIDLen {
		token = c.Value
	} else {
		var err error
		if token, err = randomID(); err != nil {
			in.log.Error("inbox sign-in: no random token", "err", err)
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{
		Name: loginCookie, Value: token, Path: "/login", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: int(loginTTL / time.Second),
	})
	pg := loginPage{Page: Page{Title: "Sign in", CSRF: token}, Next: next, Error: errMsg, TokenForm: true}
	if in.oidc != nil {
		pg.Provider, pg.TokenForm = in.oidc.cfg.Name, !in.oidc.cfg.Only
		pg.StartURL = oidcStartPath + "?next=" + url.QueryEscape(next)
	}
	in.render(w, status, "login", pg)
}

// validLoginCSRF reports whether a sign-in post carries the token its
// login cookie holds (compared in constant time).
func validLoginCSRF(r *http.Request) bool {
	c, err := r.Cookie(loginCookie)
	got := r.PostForm.Get(csrfField)
	return err == nil && len(c.Value) == sessionIDLen && subtle.ConstantTimeCompare([]byte(got), []byte(c.Value)) == 1
}

// postLogin exchanges a bearer token for a session. The token is checked
// exactly as the API checks it; it is neither stored nor logged.
func (in *Inbox) postLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	next := localPath(r.PostForm.Get("next"))
	if in.oidc != nil && in.oidc.cfg.Only {
		in.logins.WithLabelValues("token_disabled").Inc()
		in.renderLogin(w, r, http.StatusForbidden, next, "Sign in with "+in.oidc.cfg.Name+": tokens do not open the inbox here.")
		return
	}
	if !validLoginCSRF(r) {
		in.logins.WithLabelValues("invalid_csrf").Inc()
		in.log.Warn("inbox sign-in refused: the form was not sent by the sign-in page", "remote", r.RemoteAddr)
		in.renderLogin(w, r, http.StatusForbidden, next, "The sign-in form was out of date or not sent by this site. Sign in again.")
		return
	}
	sum := sha256.Sum256([]byte(token))
	p, ok := api.Principal{}, false
	if token != "" {
		p, ok = in.api.AuthenticateSum(sum)
	}
	if !ok {
		in.logins.WithLabelValues("invalid_token").Inc()
		in.log.Warn("inbox sign-in refused: the token is not valid", "remote", r.RemoteAddr)
		in.renderLogin(w, r, http.StatusUnauthorized, next, "That token is not valid.")
		return
	}
	sess, err := in.sessions.create(r.Context(), sum, p)
	if err != nil {
		in.log.Error("inbox sign-in: the session could not be stored", "err", err)
		storeUnavailable(w)
		return
	}
	in.logins.WithLabelValues("ok").Inc()
	in.log.Info("inbox sign-in", "method", methodToken, "subject", p.Subject, "token_name", p.Name)
	in.setSessionCookie(w, r, sess)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// setSessionCookie gives the browser its new session, and ends the login
// CSRF token, which has served: the next sign-in gets a new one.
func (in *Inbox) setSessionCookie(w http.ResponseWriter, r *http.Request, sess *session) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: sess.id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), Expires: sess.expires, MaxAge: int(sessionTTL / time.Second),
	})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/login", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r), MaxAge: -1})
}

func (in *Inbox) postLogout(w http.ResponseWriter, r *http.Request, sess *session) {
	if err := in.sessions.drop(r.Context(), sess.id); err != nil {
		in.log.Error("inbox sign-out: the session could not be deleted", "err", err)
		storeUnavailable(w)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: -1,
	})
	in.log.Info("inbox sign-out", "method", sess.method, "subject", sess.p.Subject)
	// An OIDC session's sign-out continues at the provider, when it offers
	// one, so that the browser's next sign-in asks the person again. Not
	// by a redirect: the page's form-action 'self' forbids a form's
	// navigation to leave the site, so the page that answers the form
	// sends the browser on (Refresh), with a link in case it does not.
	if sess.method == methodOIDC && in.oidc != nil {
		if end := in.oidc.endSessionURL(sess.idToken); end != "" {
			w.Header().Set("Refresh", "0; url="+end)
			in.render(w, http.StatusOK, "signedout", signedOutPage{Page: Page{Title: "Signed out"}, Provider: in.oidc.cfg.Name, EndURL: end})
			return
		}
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
