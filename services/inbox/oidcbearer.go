package inbox

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/services/api"
)

// The provider's tokens on the JSON API. Where OIDC sign-in is configured,
// /v1 also takes, as a bearer token, a JWT the provider signed whose
// audience is the inbox's client or one of OIDC.APIAudiences: an ID token
// (a command-line client's, or a service's) or a JWT access token issued
// for this API. It stands for the directory person its subject (or
// verified email) names, with what the directory gives them, narrowed by
// the groups and tenants claims exactly as an inbox sign-in is; it is
// judged again on every request, so a person removed from the directory
// loses access at once, and it ends at its exp.
const (
	// bearerMaxLife refuses tokens meant to live longer than a day: a
	// bearer JWT cannot be revoked before its exp.
	bearerMaxLife = 24 * time.Hour
	// keysRefetchEvery is the least time between two reads of the
	// provider's keys for a token signed by none of those known: a rotated
	// key is found at once, and a stream of forged tokens cannot make this
	// server hammer the provider.
	keysRefetchEvery = 30 * time.Second
)

// bearerAlgs are the signature algorithms a provider's token may use:
// asymmetric only, so that no public value can sign.
var bearerAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// bearerTokens verifies the provider's tokens for the API
// (api.BearerVerifier).
type bearerTokens struct {
	o *oidcSignIn

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
}

func (in *Inbox) bearerTokens() *bearerTokens { return &bearerTokens{o: in.oidc} }

// unauthenticated is the API's refusal of a token, with why.
func unauthenticated(format string, a ...any) *api.Error {
	return &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated, Message: fmt.Sprintf(format, a...)}
}

// Verify answers the principal of a provider's token, or an *api.Error.
func (b *bearerTokens) Verify(ctx context.Context, raw string) (api.Principal, error) {
	v, err := b.verifierFor(ctx)
	if err != nil {
		return api.Principal{}, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
			Message: "the identity provider cannot be reached to check the token; try again"}
	}
	idt, err := v.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) {
			return api.Principal{}, unauthenticated("the identity provider's token expired at %s; get a new one", expired.Expiry.UTC().Format(time.RFC3339))
		}
		return api.Principal{}, unauthenticated("the bearer token is not valid: not a token of the identity provider (%s)", b.o.cfg.Issuer)
	}
	if !b.meantForUs(idt) {
		return api.Principal{}, unauthenticated("the identity provider's token was issued for another application (audience %v)", idt.Audience)
	}
	if idt.IssuedAt.IsZero() || idt.Expiry.Sub(idt.IssuedAt) > bearerMaxLife {
		return api.Principal{}, unauthenticated("the identity provider's token must say when it was issued and live at most %s", bearerMaxLife)
	}
	var rawClaims map[string]json.RawMessage
	if err := idt.Claims(&rawClaims); err != nil {
		return api.Principal{}, unauthenticated("the identity provider's token could not be read")
	}
	c := claims{Subject: idt.Subject}
	if err := b.o.applyClaims(&c, rawClaims); err != nil {
		return api.Principal{}, unauthenticated("%s", refusalMessage(err))
	}
	if b.missing(c, rawClaims) {
		return api.Principal{}, unauthenticated("the identity provider's token lacks the claims sign-in reads (%s); ask for a token with them", b.o.neededClaims())
	}
	u, r := b.o.match(c)
	if r != nil {
		return api.Principal{}, unauthenticated("%s", r.msg)
	}
	p, r := principalOf(u, b.o.grantOf(c), &b.o.cfg)
	if r != nil {
		return api.Principal{}, unauthenticated("%s", r.msg)
	}
	p.Name = "oidc-bearer"
	p.Expires = idt.Expiry
	return p, nil
}

// meantForUs reports whether the token's audience names this API: one of
// its audiences is accepted, and a token for several names an accepted
// authorized party (azp).
func (b *bearerTokens) meantForUs(idt *oidc.IDToken) bool {
	accepted := append([]string{b.o.cfg.ClientID}, b.o.cfg.APIAudiences...)
	if b.o.cfg.CLIClientID != "" {
		accepted = append(accepted, b.o.cfg.CLIClientID)
	}
	if !slices.ContainsFunc(idt.Audience, func(a string) bool { return slices.Contains(accepted, a) }) {
		return false
	}
	if len(idt.Audience) == 1 {
		return true
	}
	var azp struct {
		AZP string `json:"azp"`
	}
	return idt.Claims(&azp) == nil && slices.Contains(accepted, azp.AZP)
}

// missing reports whether the token lacks claims the configuration
// reads. Unlike a sign-in, a bearer token has no userinfo endpoint to ask:
// an email without email_verified is an email not verified.
func (b *bearerTokens) missing(c claims, raw map[string]json.RawMessage) bool {
	_, email := raw["email"]
	cfg := &b.o.cfg
	return cfg.Match == MatchEmail && !email || cfg.GroupsClaim != "" && !c.HasGroups || cfg.TenantsClaim != "" && !c.HasTenants
}

// neededClaims names the claims the configuration reads.
func (o *oidcSignIn) neededClaims() string {
	var need []string
	if o.cfg.Match == MatchEmail {
		need = append(need, "email")
	}
	if o.cfg.GroupsClaim != "" {
		need = append(need, o.cfg.GroupsClaim)
	}
	if o.cfg.TenantsClaim != "" {
		need = append(need, o.cfg.TenantsClaim)
	}
	return fmt.Sprint(need)
}

func refusalMessage(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.msg
	}
	return "the identity provider's token could not be read"
}

// verifierFor builds, at first use, the verifier of the provider's tokens
// from its discovery document; a provider away is tried again next time.
func (b *bearerTokens) verifierFor(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.verifier != nil {
		return b.verifier, nil
	}
	p, err := b.o.provider(ctx)
	if err != nil {
		return nil, err
	}
	var disc struct {
		JWKS string   `json:"jwks_uri"`
		Algs []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := p.Claims(&disc); err != nil || disc.JWKS == "" {
		return nil, fmt.Errorf("%w: the discovery document names no jwks_uri", errProvider)
	}
	var algs []string
	for _, a := range disc.Algs {
		if slices.Contains(bearerAlgs, jose.SignatureAlgorithm(a)) {
			algs = append(algs, a)
		}
	}
	if len(algs) == 0 {
		algs = []string{string(jose.RS256)}
	}
	keys := &providerKeys{url: disc.JWKS, client: b.o.cfg.HTTPClient, now: b.o.now}
	b.verifier = oidc.NewVerifier(b.o.cfg.Issuer, keys, &oidc.Config{SkipClientIDCheck: true, SupportedSigningAlgs: algs, Now: b.o.now})
	return b.verifier, nil
}

// providerKeys is the provider's signing keys (its JWKS), read when a
// token names a key not known, at most once per keysRefetchEvery. A token
// that names a known key but whose signature does not verify is refused
// without asking the provider.
type providerKeys struct {
	url    string
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time
}

// VerifySignature implements oidc.KeySet.
func (k *providerKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSigned(raw, bearerAlgs)
	if err != nil {
		return nil, fmt.Errorf("oidc bearer: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("oidc bearer: want one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	for _, key := range k.keysFor(ctx, kid) {
		if kid != "" && key.KeyID != kid {
			continue
		}
		if payload, err := jws.Verify(key.Key); err == nil {
			return payload, nil
		}
	}
	return nil, errors.New("oidc bearer: signed by none of the provider's keys")
}

// keysFor answers the keys known, read afresh first when none has kid (or
// none is known) and the last read is older than keysRefetchEvery. The
// read happens outside the lock: tokens of keys already known are not held
// up by a slow provider meanwhile.
func (k *providerKeys) keysFor(ctx context.Context, kid string) []jose.JSONWebKey {
	k.mu.Lock()
	known := len(k.keys) > 0 && (kid == "" || slices.ContainsFunc(k.keys, func(key jose.JSONWebKey) bool { return key.KeyID == kid }))
	if known || !k.fetched.IsZero() && k.now().Sub(k.fetched) < keysRefetchEvery {
		keys := k.keys
		k.mu.Unlock()
		return keys
	}
	k.fetched = k.now() // this caller reads; the others meanwhile use the keys known
	k.mu.Unlock()
	keys, err := k.read(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		k.keys = keys
	}
	return k.keys // on a failed read, the keys known still verify what they signed
}

// read fetches the provider's JWKS and keeps its public signing keys.
func (k *providerKeys) read(ctx context.Context) ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("oidc bearer: %s answered %s", k.url, resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("oidc bearer: read %s: %w", k.url, err)
	}
	var out []jose.JSONWebKey
	for _, key := range set.Keys {
		switch key.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			continue // private or symmetric material never verifies here
		}
		if key.Use == "" || key.Use == "sig" {
			out = append(out, key)
		}
	}
	return out, nil
}

// LoginPath is where a server whose provider has a command-line client
// says which (LoginInfo), for 'countersign login'.
const LoginPath = "/.well-known/countersign-login"

// LoginInfo is what 'countersign login' needs to sign a person in: the
// provider and the public client it signs in as, and the scopes to ask.
type LoginInfo struct {
	Issuer   string   `json:"issuer"`
	ClientID string   `json:"client_id"`
	Scopes   []string `json:"scopes"`
}

// getLoginInfo answers LoginPath.
func (in *Inbox) getLoginInfo(w http.ResponseWriter, _ *http.Request) {
	cfg := &in.oidc.cfg
	scopes := slices.Clone(cfg.Scopes)
	if !slices.Contains(scopes, "offline_access") {
		scopes = append(scopes, "offline_access")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_ = json.NewEncoder(w).Encode(LoginInfo{Issuer: cfg.Issuer, ClientID: cfg.CLIClientID, Scopes: scopes})
}
