package inbox

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/services/api"
)

// How an OIDC sign-in is matched to a directory user.
const (
	// MatchSubject matches the ID token's sub claim to a user's
	// oidc_subject (the default: a subject never changes hands).
	MatchSubject = "subject"
	// MatchEmail matches the provider's verified email address to a
	// user's email.
	MatchEmail = "email"
)

// OIDC configures sign-in through an OpenID Connect provider: the
// authorization code flow with PKCE (S256), the inbox a confidential
// client. Who signed in is the directory user the provider's subject, or
// verified email, names; what they may do comes from the directory, and
// the provider's groups and tenants claims, when configured, only narrow it.
type OIDC struct {
	// Issuer is the provider's issuer URL (https; http only on a loopback
	// host). Its discovery document is read at the first sign-in.
	Issuer string
	// ClientID and ClientSecret are the inbox's client at the provider.
	ClientID     string
	ClientSecret string
	// RedirectURL is where the provider sends the browser back: this
	// server's /oidc/callback, as registered at the provider.
	RedirectURL string
	// PostLogoutRedirectURL is where the provider sends the browser after
	// its sign-out (default: RedirectURL's origin and /login); it must be
	// registered at the provider too.
	PostLogoutRedirectURL string
	// Scopes asked for (default openid, email and profile); openid is
	// required. offline_access asks for a refresh token, which keeps a
	// session beyond its ID token's lifetime while the provider agrees.
	Scopes []string
	// Match is MatchSubject (the default) or MatchEmail.
	Match string
	// GroupsClaim, when set, names the claim that lists the person's
	// groups at the provider: a person the directory puts in groups must
	// be in at least one of them by the provider too.
	GroupsClaim string
	// TenantsClaim, when set, names the claim that lists the person's
	// tenants at the provider: the session keeps only the tenants both
	// the directory and the provider give.
	TenantsClaim string
	// Name is the provider's name on the sign-in button (default
	// "single sign-on").
	Name string
	// Only hides the token form: people sign in through the provider only.
	Only bool
	// APIAudiences are the audiences, besides ClientID, of the provider's
	// tokens /v1 takes as bearer tokens (oidcbearer.go): a command-line
	// client's id, or the identifier of this API for JWT access tokens.
	APIAudiences []string
	// CLIClientID, when set, is a public client at the provider (PKCE,
	// loopback redirect http://127.0.0.1:<any port>/callback) that
	// 'countersign login' signs people in with; its tokens are accepted
	// on /v1 like APIAudiences', and /.well-known/countersign-login names
	// it with the issuer.
	CLIClientID string
	// People is the live directory sign-ins are matched to.
	People directory.Source
	// HTTPClient talks to the provider (default: one with a 10 s timeout).
	HTTPClient *http.Client
}

func (o *OIDC) setDefaults() {
	if len(o.Scopes) == 0 {
		o.Scopes = []string{oidc.ScopeOpenID, "email", "profile"}
	}
	if o.Match == "" {
		o.Match = MatchSubject
	}
	if o.Name == "" {
		o.Name = "single sign-on"
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: providerTimeout}
	}
	if o.PostLogoutRedirectURL == "" {
		if u, err := url.Parse(o.RedirectURL); err == nil {
			o.PostLogoutRedirectURL = u.Scheme + "://" + u.Host + "/login"
		}
	}
}

// ValidIssuer reports what is wrong with an issuer URL, or "": it must be
// an https URL without query or fragment, or http on a loopback host.
func ValidIssuer(issuer string) string {
	u, err := url.Parse(issuer)
	switch {
	case err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "must be an absolute URL without user, query or fragment"
	case u.Scheme == "https":
		return ""
	case u.Scheme == "http" && loopback(u.Hostname()):
		return ""
	}
	return "must be https (http only on localhost, 127.0.0.1 or ::1)"
}

// ValidRedirect reports what is wrong with a redirect URL, or "".
func ValidRedirect(redirect string) string {
	u, err := url.Parse(redirect)
	switch {
	case err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "must be an absolute URL without user, query or fragment"
	case u.Scheme != "https" && (u.Scheme != "http" || !loopback(u.Hostname())):
		return "must be https (http only on localhost, 127.0.0.1 or ::1)"
	case !strings.HasSuffix(u.Path, oidcCallbackPath):
		return "must end with " + oidcCallbackPath + ", where the inbox serves the callback"
	}
	return ""
}

func loopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

func (o *OIDC) validate() []error {
	var errs []error
	if msg := ValidIssuer(o.Issuer); msg != "" {
		errs = append(errs, fmt.Errorf("inbox: Config.OIDC.Issuer %q %s", o.Issuer, msg))
	}
	if o.ClientID == "" {
		errs = append(errs, errors.New("inbox: Config.OIDC.ClientID is required"))
	}
	if o.ClientSecret == "" {
		errs = append(errs, errors.New("inbox: Config.OIDC.ClientSecret is required (the inbox is a confidential client)"))
	}
	if msg := ValidRedirect(o.RedirectURL); msg != "" {
		errs = append(errs, fmt.Errorf("inbox: Config.OIDC.RedirectURL %q %s", o.RedirectURL, msg))
	}
	if !slices.Contains(o.Scopes, oidc.ScopeOpenID) {
		errs = append(errs, fmt.Errorf("inbox: Config.OIDC.Scopes must include %q", oidc.ScopeOpenID))
	}
	if o.Match != MatchSubject && o.Match != MatchEmail {
		errs = append(errs, fmt.Errorf("inbox: Config.OIDC.Match must be %q or %q, got %q", MatchSubject, MatchEmail, o.Match))
	}
	if o.People == nil {
		errs = append(errs, errors.New("inbox: Config.OIDC.People is required (the directory sign-ins are matched to)"))
	}
	audiences := slices.Clone(o.APIAudiences)
	if o.CLIClientID != "" {
		audiences = append(audiences, o.CLIClientID)
	}
	for _, a := range audiences {
		if a == "" || strings.TrimSpace(a) != a {
			errs = append(errs, fmt.Errorf("inbox: Config.OIDC: audience %q is empty or has spaces around it", a))
		}
	}
	return errs
}

// Routes and cookies of the OIDC sign-in.
const (
	oidcStartPath    = "/oidc/start"
	oidcCallbackPath = "/oidc/callback"
	// flowCookie carries one sign-in's state, nonce and PKCE verifier from
	// /oidc/start to the callback. SameSite=Lax: the provider's redirect
	// back is a top-level navigation from another site.
	flowCookie = "countersign_oidc"
	// flowTTL bounds the time between the start and the callback.
	flowTTL = 10 * time.Minute
	// providerTimeout bounds one exchange with the provider.
	providerTimeout = 10 * time.Second
)

// flow is what the flow cookie holds. None of it is trusted beyond the
// equality checks it serves: the state must come back from the provider,
// the nonce inside its signed ID token, the verifier is proof of the start.
type flow struct {
	State    string    `json:"s"`
	Nonce    string    `json:"n"`
	Verifier string    `json:"v"`
	Next     string    `json:"x"`
	Expires  time.Time `json:"e"`
}

// oidcGrant is what an OIDC session keeps of its sign-in, in the session's
// entry: who the provider said it was, what it narrowed, and what lets
// the session last and end.
type oidcGrant struct {
	Subject string `json:"subject"`
	// Email is the verified address a MatchEmail sign-in was matched by.
	Email string `json:"email,omitempty"`
	// Groups and Tenants are the provider's claims, when configured.
	Groups  []string `json:"groups,omitempty"`
	Tenants []string `json:"tenants,omitempty"`
	// IDToken is the last ID token, sent back as id_token_hint at sign-out.
	IDToken      string `json:"id_token"`
	RefreshToken string `json:"refresh_token,omitempty"`
	// ExpiresAt is when the session needs the provider again: the ID
	// token's lifetime, counted on this server's clock from its receipt.
	ExpiresAt time.Time `json:"expires_at"`
}

// errProvider says the provider could not be reached or answered with an
// error of its own; the session is neither used nor ended.
var errProvider = errors.New("the identity provider cannot be reached")

// oidcSignIn is the inbox's client of the provider.
type oidcSignIn struct {
	cfg OIDC
	now func() time.Time

	mu   sync.Mutex
	prov *oidc.Provider
	// endSession is the provider's end_session_endpoint, if it has one.
	endSession string
}

// clientContext is ctx with the provider's HTTP client.
func (o *oidcSignIn) clientContext(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, o.cfg.HTTPClient)
}

// provider reads the provider's discovery document at first use and keeps
// it; a failure is tried again at the next use, so that a provider away at
// start-up does not stop the inbox.
func (o *oidcSignIn) provider(ctx context.Context) (*oidc.Provider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.prov != nil {
		return o.prov, nil
	}
	ctx, cancel := context.WithTimeout(o.clientContext(context.WithoutCancel(ctx)), providerTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, o.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: discovery at %s: %v", errProvider, o.cfg.Issuer, err)
	}
	var extra struct {
		EndSession string   `json:"end_session_endpoint"`
		Methods    []string `json:"code_challenge_methods_supported"`
	}
	_ = p.Claims(&extra)
	if e, err := url.Parse(extra.EndSession); err == nil && (e.Scheme == "https" || e.Scheme == "http" && loopback(e.Hostname())) {
		o.endSession = extra.EndSession
	}
	o.prov = p
	return p, nil
}

func (o *oidcSignIn) oauth(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: o.cfg.Scopes,
	}
}

// refusal is a sign-in the inbox turns down, with what the person is told.
type refusal struct {
	// reason is the metric label and log value.
	reason string
	msg    string
}

func (r *refusal) Error() string { return r.reason }

func refuse(reason, msg string) *refusal { return &refusal{reason: reason, msg: msg} }

// claims are what the inbox reads of an ID token (and of the userinfo
// endpoint, for what the ID token leaves out).
type claims struct {
	Subject       string
	Email         string
	EmailVerified bool
	Groups        []string
	HasGroups     bool
	Tenants       []string
	HasTenants    bool
}

// readClaims reads the claims the configuration needs from the verified
// ID token; those it lacks come from the userinfo endpoint with the
// access token, when the provider has one (its subject must be the ID
// token's).
func (o *oidcSignIn) readClaims(ctx context.Context, p *oidc.Provider, idt *oidc.IDToken, tok *oauth2.Token) (claims, error) {
	c := claims{Subject: idt.Subject}
	var raw map[string]json.RawMessage
	if err := idt.Claims(&raw); err != nil {
		return c, refuse("invalid_token", "The identity provider's answer could not be read.")
	}
	if err := o.applyClaims(&c, raw); err != nil {
		return c, err
	}
	if !o.missing(c, raw) || p.UserInfoEndpoint() == "" || tok.AccessToken == "" {
		return c, nil
	}
	info, err := p.UserInfo(o.clientContext(ctx), oauth2.StaticTokenSource(tok))
	if err != nil {
		return c, fmt.Errorf("%w: userinfo: %v", errProvider, err)
	}
	if info.Subject != idt.Subject {
		return c, refuse("invalid_token", "The identity provider's answers did not agree on who you are.")
	}
	var more map[string]json.RawMessage
	if err := info.Claims(&more); err != nil {
		return c, refuse("invalid_token", "The identity provider's answer could not be read.")
	}
	for k, v := range more {
		if _, ok := raw[k]; !ok {
			raw[k] = v
		}
	}
	return c, o.applyClaims(&c, raw)
}

// missing reports whether the claims the configuration needs are not all
// in raw.
func (o *oidcSignIn) missing(c claims, raw map[string]json.RawMessage) bool {
	_, email := raw["email"]
	_, verified := raw["email_verified"]
	return o.cfg.Match == MatchEmail && (!email || !verified) ||
		o.cfg.GroupsClaim != "" && !c.HasGroups || o.cfg.TenantsClaim != "" && !c.HasTenants
}

func (o *oidcSignIn) applyClaims(c *claims, raw map[string]json.RawMessage) error {
	bad := func(name string) error {
		return refuse("invalid_claims", fmt.Sprintf("The identity provider's %s claim is not what Countersign reads.", name))
	}
	if v, ok := raw["email"]; ok && string(v) != "null" {
		if json.Unmarshal(v, &c.Email) != nil {
			return bad("email")
		}
	}
	if v, ok := raw["email_verified"]; ok {
		// Some providers send the boolean as a string.
		var b bool
		var s string
		switch {
		case json.Unmarshal(v, &b) == nil:
			c.EmailVerified = b
		case json.Unmarshal(v, &s) == nil:
			c.EmailVerified = s == "true"
		default:
			return bad("email_verified")
		}
	}
	list := func(name string, dst *[]string, has *bool) error {
		v, ok := raw[name]
		if name == "" || !ok || string(v) == "null" {
			return nil
		}
		var one string
		if json.Unmarshal(v, dst) != nil {
			if json.Unmarshal(v, &one) != nil {
				return bad(name)
			}
			*dst = []string{one}
		}
		*has = true
		return nil
	}
	if err := list(o.cfg.GroupsClaim, &c.Groups, &c.HasGroups); err != nil {
		return err
	}
	return list(o.cfg.TenantsClaim, &c.Tenants, &c.HasTenants)
}

// match finds the directory user the claims name: by subject, or by an
// email address the provider verified.
func (o *oidcSignIn) match(c claims) (directory.User, *refusal) {
	dir := o.cfg.People.Current()
	if o.cfg.Match == MatchEmail {
		if c.Email == "" || !c.EmailVerified {
			return directory.User{}, refuse("email_unverified", "Your identity provider did not vouch for your email address, so it cannot say who you are here. Ask its administrator to verify it.")
		}
		if u, ok := dir.ByEmail(c.Email); ok {
			return u, nil
		}
	} else if u, ok := dir.ByOIDCSubject(c.Subject); ok {
		return u, nil
	}
	return directory.User{}, refuse("unknown_person", "Countersign does not know the account you signed in with. Ask an administrator to add you to the approver directory.")
}

// grantOf is the session's record of a sign-in with claims c.
func (o *oidcSignIn) grantOf(c claims) *oidcGrant {
	g := &oidcGrant{Subject: c.Subject}
	if o.cfg.Match == MatchEmail {
		g.Email = c.Email
	}
	if o.cfg.GroupsClaim != "" {
		g.Groups = c.Groups
	}
	if o.cfg.TenantsClaim != "" {
		g.Tenants = c.Tenants
	}
	return g
}

// resolve finds the session's person in the live directory again, by the
// key it signed in with, and its principal now. ok is false when the
// person is gone, the key names someone else, or nothing is left to them.
func (o *oidcSignIn) resolve(personID string, g *oidcGrant) (api.Principal, bool) {
	c := claims{Subject: g.Subject, Email: g.Email, EmailVerified: true}
	u, r := o.match(c)
	if r != nil || u.ID != personID {
		return api.Principal{}, false
	}
	p, r := principalOf(u, g, &o.cfg)
	return p, r == nil
}

// principalOf is what person u may do in a session the provider granted
// with g. Authority comes from the directory: the roles of the person's
// tokens (approver for a person with none: what a policy naming them lets
// them do by email or Slack), less agent, which is a program's; their
// tenants; a viewer's or auditor's agent limits. The provider's claims
// only narrow it: its tenants intersect the directory's, and a person the
// directory puts in groups must be in one of them by the provider too.
func principalOf(u directory.User, g *oidcGrant, cfg *OIDC) (api.Principal, *refusal) {
	p := api.Principal{Name: "oidc", Subject: u.ID, Tenants: slices.Clone(u.Tenants)}
	readersLimited := true
	var agents []string
	for _, t := range u.Tokens {
		for _, r := range t.Roles {
			if r != api.RoleAgent && !slices.Contains(p.Roles, r) {
				p.Roles = append(p.Roles, r)
			}
		}
		if slices.Contains(t.Roles, api.RoleViewer) || slices.Contains(t.Roles, api.RoleAuditor) {
			if len(t.Agents) == 0 {
				readersLimited = false
			}
			for _, a := range t.Agents {
				if !slices.Contains(agents, a) {
					agents = append(agents, a)
				}
			}
		}
	}
	if readersLimited {
		p.Agents = agents
	}
	if len(u.Tokens) == 0 {
		p.Roles = []string{api.RoleApprover}
	}
	slices.Sort(p.Roles)
	if len(p.Roles) == 0 {
		return p, refuse("no_role", "Your directory entry gives you nothing to do in the inbox (its tokens are an agent's).")
	}
	if cfg.GroupsClaim != "" && len(u.Groups) > 0 && !slices.ContainsFunc(u.Groups, func(gr string) bool { return slices.Contains(g.Groups, gr) }) {
		return p, refuse("groups_narrowed", "Your identity provider no longer lists you in any of your Countersign groups.")
	}
	if cfg.TenantsClaim != "" {
		var kept []string
		for _, t := range g.Tenants {
			if (len(u.Tenants) == 0 || slices.Contains(u.Tenants, t)) && !slices.Contains(kept, t) {
				kept = append(kept, t)
			}
		}
		if len(kept) == 0 {
			return p, refuse("tenants_narrowed", "Your identity provider lists you in none of your Countersign tenants.")
		}
		p.Tenants = kept
	}
	return p, nil
}

// expiry is when a session granted now by an ID token needs the provider
// again: the token's lifetime (exp − iat) from now on this server's clock,
// so that a provider's clock ahead or behind ours neither shortens nor
// stretches it. A token without a sensible iat counts from now to its exp.
func expiry(now time.Time, idt *oidc.IDToken) time.Time {
	life := idt.Expiry.Sub(idt.IssuedAt)
	if idt.IssuedAt.IsZero() || life <= 0 || life > sessionTTL {
		life = time.Until(idt.Expiry)
	}
	return now.Add(min(life, sessionTTL))
}

// verify checks an ID token's signature, issuer, audience and expiry, and
// that a token meant for several audiences was issued to this client.
func (o *oidcSignIn) verify(ctx context.Context, p *oidc.Provider, raw string) (*oidc.IDToken, error) {
	idt, err := p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}).Verify(o.clientContext(ctx), raw)
	if err != nil {
		return nil, refuse("invalid_token", "The identity provider's answer could not be verified. Sign in again.")
	}
	if len(idt.Audience) > 1 {
		var azp struct {
			AZP string `json:"azp"`
		}
		if idt.Claims(&azp) != nil || azp.AZP != o.cfg.ClientID {
			return nil, refuse("invalid_token", "The identity provider's answer was meant for another application.")
		}
	}
	return idt, nil
}

// refresh asks the provider to extend grant g. It answers the new grant,
// or a *refusal when the provider refuses (the session ends), or an error
// wrapping errProvider when it cannot be reached.
func (o *oidcSignIn) refresh(ctx context.Context, g *oidcGrant) (*oidcGrant, error) {
	if g.RefreshToken == "" {
		return nil, refuse("expired", "")
	}
	p, err := o.provider(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(o.clientContext(ctx), providerTimeout)
	defer cancel()
	tok, err := o.oauth(p).TokenSource(ctx, &oauth2.Token{RefreshToken: g.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re) && re.Response != nil && re.Response.StatusCode < 500:
		return nil, refuse("refresh_refused", "")
	case err != nil:
		return nil, fmt.Errorf("%w: refresh: %v", errProvider, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		// Without a new ID token the session cannot be bound to the
		// provider's word about the person: it ends.
		return nil, refuse("refresh_without_id_token", "")
	}
	idt, err := o.verify(ctx, p, raw)
	if err != nil {
		return nil, err
	}
	if idt.Subject != g.Subject {
		return nil, refuse("refresh_other_subject", "")
	}
	c, err := o.readClaims(ctx, p, idt, tok)
	if err != nil {
		return nil, err
	}
	next := o.grantOf(c)
	if o.cfg.Match == MatchEmail {
		// The address the session was matched by must still be verified.
		if c.Email != "" && (!c.EmailVerified || !strings.EqualFold(c.Email, g.Email)) {
			return nil, refuse("email_changed", "")
		}
		next.Email = g.Email
	}
	next.IDToken, next.RefreshToken, next.ExpiresAt = raw, g.RefreshToken, expiry(o.now(), idt)
	if tok.RefreshToken != "" {
		next.RefreshToken = tok.RefreshToken
	}
	return next, nil
}

// getOIDCStart begins a sign-in at the provider: a new state, nonce and
// PKCE verifier in the flow cookie, and a redirect to the provider's
// authorization endpoint.
func (in *Inbox) getOIDCStart(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	p, err := in.oidc.provider(r.Context())
	if err != nil {
		in.log.Error("inbox sign-in: the identity provider cannot be reached", "err", err)
		in.logins.WithLabelValues("oidc_unavailable").Inc()
		in.renderLogin(w, r, http.StatusServiceUnavailable, next, "The identity provider cannot be reached right now; try again in a moment.")
		return
	}
	f := flow{Verifier: oauth2.GenerateVerifier(), Next: next, Expires: in.now().Add(flowTTL)}
	if f.State, err = randomID(); err == nil {
		f.Nonce, err = randomID()
	}
	if err != nil {
		in.log.Error("inbox sign-in: no random state", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	b, _ := json.Marshal(f)
	http.SetCookie(w, &http.Cookie{
		Name: flowCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/oidc/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: overTLS(r), MaxAge: int(flowTTL / time.Second),
	})
	http.Redirect(w, r, in.oidc.oauth(p).AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)), http.StatusSeeOther)
}

// readFlow reads the request's flow cookie; nil when it has none that is
// well-formed and current.
func (in *Inbox) readFlow(r *http.Request) *flow {
	c, err := r.Cookie(flowCookie)
	if err != nil || len(c.Value) > 1024 {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	var f flow
	if err != nil || json.Unmarshal(b, &f) != nil || f.State == "" || f.Nonce == "" || f.Verifier == "" || !in.now().Before(f.Expires) {
		return nil
	}
	f.Next = localPath(f.Next)
	return &f
}

// getOIDCCallback finishes a sign-in: the state must be the flow's, the
// code is exchanged with the flow's PKCE verifier, the ID token must be
// valid for this client and carry the flow's nonce, and its person must
// be in the directory. Only then is a session made.
func (in *Inbox) getOIDCCallback(w http.ResponseWriter, r *http.Request) {
	// The flow serves once, whatever happens.
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: "/oidc/", HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: overTLS(r), MaxAge: -1})
	q := r.URL.Query()
	f := in.readFlow(r)
	next := "/"
	if f != nil {
		next = f.Next
	}
	fail := func(status int, r2 *refusal, attrs ...any) {
		in.logins.WithLabelValues("oidc_" + r2.reason).Inc()
		in.log.Warn("inbox sign-in refused", append([]any{"method", methodOIDC, "reason", r2.reason, "remote", r.RemoteAddr}, attrs...)...)
		in.renderLogin(w, r, status, next, r2.msg)
	}
	switch {
	case f == nil:
		fail(http.StatusBadRequest, refuse("no_flow", "The sign-in took too long, or was not started here. Sign in again."))
		return
	case q.Get("state") == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.State)) != 1:
		fail(http.StatusBadRequest, refuse("state_mismatch", "The sign-in was not the one this browser started. Sign in again."))
		return
	case q.Get("error") != "":
		fail(http.StatusForbidden, refuse("provider_error", "The identity provider did not sign you in."), "error", q.Get("error"))
		return
	case q.Get("code") == "":
		fail(http.StatusBadRequest, refuse("no_code", "The identity provider's answer was incomplete. Sign in again."))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*providerTimeout)
	defer cancel()
	sess, err := in.oidcSignIn(ctx, q.Get("code"), f)
	var rf *refusal
	switch {
	case errors.As(err, &rf):
		fail(http.StatusForbidden, rf)
		return
	case errors.Is(err, errProvider):
		in.log.Error("inbox sign-in: the identity provider cannot be reached", "err", err)
		in.logins.WithLabelValues("oidc_unavailable").Inc()
		in.renderLogin(w, r, http.StatusServiceUnavailable, next, "The identity provider cannot be reached right now; try again in a moment.")
		return
	case err != nil:
		in.log.Error("inbox sign-in: the session could not be stored", "err", err)
		storeUnavailable(w)
		return
	}
	in.logins.WithLabelValues("oidc_ok").Inc()
	in.log.Info("inbox sign-in", "method", methodOIDC, "subject", sess.p.Subject)
	in.setSessionCookie(w, r, sess)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// oidcSignIn exchanges the code, checks the ID token and the person, and
// stores the session.
func (in *Inbox) oidcSignIn(ctx context.Context, code string, f *flow) (*session, error) {
	o := in.oidc
	p, err := o.provider(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := o.oauth(p).Exchange(o.clientContext(ctx), code, oauth2.VerifierOption(f.Verifier))
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re) && re.Response != nil && re.Response.StatusCode < 500:
		return nil, refuse("code_refused", "The identity provider refused to finish the sign-in. Sign in again.")
	case err != nil:
		return nil, fmt.Errorf("%w: token: %v", errProvider, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, refuse("no_id_token", "The identity provider did not say who you are (no ID token).")
	}
	idt, err := o.verify(ctx, p, raw)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return nil, refuse("nonce_mismatch", "The identity provider's answer was not for this sign-in. Sign in again.")
	}
	c, err := o.readClaims(ctx, p, idt, tok)
	if err != nil {
		return nil, err
	}
	u, rf := o.match(c)
	if rf != nil {
		return nil, rf
	}
	g := o.grantOf(c)
	g.IDToken, g.RefreshToken, g.ExpiresAt = raw, tok.RefreshToken, expiry(in.now(), idt)
	pr, rf := principalOf(u, g, &o.cfg)
	if rf != nil {
		return nil, rf
	}
	return in.sessions.createOIDC(ctx, u.ID, g, pr)
}

// endSessionURL is where the browser goes after the inbox's sign-out of an
// OIDC session: the provider's end_session_endpoint, when it has one,
// with the session's ID token as hint; else "".
func (o *oidcSignIn) endSessionURL(idToken string) string {
	o.mu.Lock()
	end := o.endSession
	o.mu.Unlock()
	if end == "" {
		return ""
	}
	u, err := url.Parse(end)
	if err != nil {
		return ""
	}
	q := u.Query()
	q.Set("client_id", o.cfg.ClientID)
	q.Set("post_logout_redirect_uri", o.cfg.PostLogoutRedirectURL)
	if idToken != "" {
		q.Set("id_token_hint", idToken)
	}
	u.RawQuery = q.Encode()
	return u.String()
}
