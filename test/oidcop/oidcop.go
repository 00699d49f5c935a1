// Package oidcop runs a real OpenID Connect provider for tests: zitadel's
// certified provider (github.com/zitadel/oidc/v3/pkg/op) with its example
// in-memory storage and username/password login page, on 127.0.0.1 on a
// port of its own, so that the inbox's sign-in is tested against the
// protocol as a provider speaks it (discovery, PKCE, signed ID tokens,
// userinfo, refresh tokens, end_session), not against a stub.
//
// People can be added, changed and removed while it runs; a removed
// person's refresh tokens are refused, as a provider refuses a disabled
// account.
package oidcop

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// Claims the provider adds to ID tokens and userinfo for people who have
// groups or tenants.
const (
	GroupsClaim  = "groups"
	TenantsClaim = "tenants"
)

// Person is an account at the provider.
type Person struct {
	// Subject is the sub claim; Username and Password sign in on the
	// provider's login page.
	Subject, Username, Password string
	Email                       string
	EmailVerified               bool
	// Groups and Tenants, when not nil, are sent as the groups and
	// tenants claims.
	Groups, Tenants []string
}

// Provider is a running OpenID provider.
type Provider struct {
	// Issuer is the provider's issuer URL (http://127.0.0.1:PORT).
	Issuer string
	// ClientID and ClientSecret are the one client registered: a web
	// client that may use refresh tokens and redirect to /oidc/callback,
	// and after sign-out to /login, on any port of 127.0.0.1.
	ClientID, ClientSecret string
	// CLIClientID is a public (native) client with PKCE that redirects to
	// /callback on any port of 127.0.0.1, as a command-line program
	// signing in through the browser does. Its ID tokens carry the
	// profile and email claims (the inbox client's leave them to the
	// userinfo endpoint).
	CLIClientID string
	// OtherClientID and OtherClientSecret are a web client of another
	// application, redirecting like ClientID.
	OtherClientID, OtherClientSecret string
	people                           *people
}

// Start runs a provider until the test ends.
func Start(t testing.TB) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{
		Issuer: "http://" + ln.Addr().String(), ClientID: "countersign-inbox", ClientSecret: "test-client-secret",
		CLIClientID: "countersign-cli", OtherClientID: "another-app", OtherClientSecret: "another-secret",
		people: &people{bySub: map[string]*storage.User{}, extra: map[string]Person{}},
	}
	web := storage.WebClient(p.ClientID, p.ClientSecret, "http://127.0.0.1/oidc/callback")
	cli := storage.NativeClient(p.CLIClientID, "http://127.0.0.1/callback")
	other := storage.WebClient(p.OtherClientID, p.OtherClientSecret, "http://127.0.0.1/oidc/callback")
	webGlobs := func(c *storage.Client) globClient {
		return globClient{Client: c, redirects: []string{"http://127.0.0.1:*/oidc/callback"}, logouts: []string{"http://127.0.0.1:*/login"}}
	}
	st := &store{
		Storage: storage.NewStorageWithClients(p.people, map[string]*storage.Client{p.ClientID: web, p.CLIClientID: cli, p.OtherClientID: other}),
		clients: map[string]globClient{
			p.ClientID: webGlobs(web), p.OtherClientID: webGlobs(other),
			p.CLIClientID: {Client: cli, redirects: []string{"http://127.0.0.1:*/callback"}, claimsInIDToken: true},
		},
		people: p.people,
	}
	srv := &http.Server{Handler: exampleop.SetupServer(p.Issuer, st, nil, false)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// Add adds person, or replaces the person with the same subject.
func (p *Provider) Add(person Person) {
	p.people.mu.Lock()
	defer p.people.mu.Unlock()
	p.people.bySub[person.Subject] = &storage.User{
		ID: person.Subject, Username: person.Username, Password: person.Password, FirstName: person.Username,
		Email: person.Email, EmailVerified: person.EmailVerified, PreferredLanguage: language.English,
	}
	p.people.extra[person.Subject] = person
}

// Remove removes the person with subject: they cannot sign in, and the
// provider refuses their refresh tokens.
func (p *Provider) Remove(subject string) {
	p.people.mu.Lock()
	defer p.people.mu.Unlock()
	delete(p.people.bySub, subject)
	delete(p.people.extra, subject)
}

// people is the provider's user store, changed while it runs.
type people struct {
	mu    sync.Mutex
	bySub map[string]*storage.User
	extra map[string]Person
}

func (u *people) GetUserByID(id string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	if x, ok := u.bySub[id]; ok {
		c := *x
		return &c
	}
	return nil
}

func (u *people) GetUserByUsername(name string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, x := range u.bySub {
		if x.Username == name {
			c := *x
			return &c
		}
	}
	return nil
}

func (u *people) ExampleClientID() string { return "" }

func (u *people) get(sub string) (Person, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	p, ok := u.extra[sub]
	return p, ok
}

// store is the example storage with the clients' redirect globs, the
// groups and tenants claims, and refresh refused to removed people.
type store struct {
	*storage.Storage
	clients map[string]globClient
	people  *people
}

func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

func (s *store) claims(info *oidc.UserInfo, sub string) {
	if p, ok := s.people.get(sub); ok {
		if p.Groups != nil {
			info.AppendClaims(GroupsClaim, slices.Clone(p.Groups))
		}
		if p.Tenants != nil {
			info.AppendClaims(TenantsClaim, slices.Clone(p.Tenants))
		}
	}
}

func (s *store) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	s.claims(info, req.GetSubject())
	return nil
}

func (s *store) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	s.claims(info, info.Subject)
	return nil
}

func (s *store) TokenRequestByRefreshToken(ctx context.Context, token string) (op.RefreshTokenRequest, error) {
	req, err := s.Storage.TokenRequestByRefreshToken(ctx, token)
	if err != nil {
		return nil, err
	}
	if _, ok := s.people.get(req.GetSubject()); !ok {
		return nil, oidc.ErrInvalidGrant().WithDescription("the account is disabled")
	}
	return req, nil
}

// globClient is an example client with redirect URI globs, and the
// userinfo claims in its ID tokens when claimsInIDToken.
type globClient struct {
	*storage.Client
	redirects, logouts []string
	claimsInIDToken    bool
}

func (c globClient) IDTokenUserinfoClaimsAssertion() bool { return c.claimsInIDToken }

func (c globClient) RedirectURIGlobs() []string           { return c.redirects }
func (c globClient) PostLogoutRedirectURIGlobs() []string { return c.logouts }
