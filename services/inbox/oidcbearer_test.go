package inbox_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/inbox"
)

// providerToken signs username in at the provider as client clientID
// (with secret, or none for the public command-line client), redirected
// to redirectPath on this server, and returns the ID token it issued.
func (o *oidcEnv) providerToken(t *testing.T, clientID, secret, redirectPath, username, password string) string {
	t.Helper()
	ctx := context.Background()
	p, err := oidc.NewProvider(ctx, o.op.Issuer)
	if err != nil {
		t.Fatal(err)
	}
	conf := &oauth2.Config{ClientID: clientID, ClientSecret: secret, RedirectURL: o.url + redirectPath,
		Endpoint: p.Endpoint(), Scopes: []string{"openid", "email"}}
	verifier := oauth2.GenerateVerifier()
	w := newWebClient(t, o.url)
	cb := mustURL(t, o.atProvider(t, w, conf.AuthCodeURL("state-1", oauth2.S256ChallengeOption(verifier)), username, password))
	code := cb.Query().Get("code")
	if code == "" || cb.Query().Get("state") != "state-1" {
		t.Fatalf("the provider's redirect carries no code: %s", cb)
	}
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange the code: %v", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		t.Fatal("the provider issued no ID token")
	}
	return raw
}

// countingTransport counts the requests for the provider's signing keys.
type countingTransport struct {
	keys atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/keys") {
		c.keys.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// segments splits a compact JWS into its header and claims (decoded) and
// its signature.
func segments(t *testing.T, raw string) (header, claims map[string]any, sig string) {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS: %q", raw)
	}
	for i, dst := range []*map[string]any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(b, dst) != nil {
			t.Fatalf("segment %d of the token: %v", i, err)
		}
	}
	return header, claims, parts[2]
}

func encodeSegment(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// signed signs claims with key under alg, naming kid.
func signed(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// wantUnauthenticated expects a 401 unauthenticated whose message says
// msg, and no change to approval id.
func (o *oidcEnv) wantUnauthenticated(t *testing.T, what, token, msg, id string) {
	t.Helper()
	o.tokens["attempt"] = token
	for _, r := range []response{
		o.call(t, "GET", "/v1/approvals", "attempt", nil),
		o.call(t, "POST", "/v1/approvals/"+id+"/votes", "attempt", map[string]any{"decision": "approve"}),
	} {
		var ans struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		r.decode(t, &ans)
		if r.status != http.StatusUnauthorized || ans.Error.Code != "unauthenticated" || !strings.Contains(ans.Error.Message, msg) {
			t.Fatalf("%s: %d %s, want 401 unauthenticated saying %q", what, r.status, r.body, msg)
		}
	}
	if rec := o.record(t, id); rec.Status != contracts.StatusPending || len(rec.Votes)+len(rec.RefusedVotes) != 0 {
		t.Fatalf("%s changed the approval: %+v", what, rec)
	}
}

// An attacker's tokens are refused on /v1 before anything is read or
// voted: the provider's token with its claims changed; one signed by
// another key under the provider's key id; unsigned (alg none) and
// HMAC-signed ones; a token of the provider for another application;
// tokens of people the directory does not know or gives only an agent's
// role; an expired token. Forged tokens naming unknown keys make this
// server read the provider's keys at most once per 30 s.
func TestOIDCBearerTokensAnAttackerPresentsAreRefused(t *testing.T) {
	keys := &countingTransport{}
	o := setupOIDCWith(t, inbox.MatchSubject, false, func(oc *inbox.OIDC) {
		oc.HTTPClient = &http.Client{Transport: keys, Timeout: 10 * time.Second}
	})
	o.applyInboxPolicy(t)
	id := o.refund(t, "run-bearer-attack", "Globex", "", 120)
	real := o.providerToken(t, o.op.ClientID, o.op.ClientSecret, "/oidc/callback", "alice", "alice-pw")
	o.tokens["alice-oidc"] = real
	if r := o.call(t, "GET", "/v1/approvals/"+id, "alice-oidc", nil); r.status != http.StatusOK {
		t.Fatalf("alice's own token: %d %s", r.status, r.body)
	}
	if n := keys.keys.Load(); n != 1 {
		t.Fatalf("%d reads of the provider's keys for the first token, want 1", n)
	}
	header, claims, sig := segments(t, real)
	kid, _ := header["kid"].(string)

	// Claims changed under the provider's signature.
	changed := maps(claims, map[string]any{"sub": "sub-dave"})
	o.wantUnauthenticated(t, "changed claims", encodeSegment(t, header)+"."+encodeSegment(t, changed)+"."+sig, "not a token of the identity provider", id)
	// Signed by the attacker's key, under the provider's key id and under new ones.
	attacker, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	o.wantUnauthenticated(t, "the attacker's key", signed(t, jose.RS256, attacker, kid, claims), "not a token of the identity provider", id)
	for i := range 5 {
		o.wantUnauthenticated(t, "an unknown key id", signed(t, jose.RS256, attacker, "rotated-"+string(rune('a'+i)), claims), "not a token of the identity provider", id)
	}
	if n := keys.keys.Load(); n != 1 {
		t.Fatalf("%d reads of the provider's keys after forged tokens within 30 s, want still 1", n)
	}
	o.shift.Add(int64(31 * time.Second))
	for range 3 {
		o.wantUnauthenticated(t, "an unknown key id, later", signed(t, jose.RS256, attacker, "rotated-z", claims), "not a token of the identity provider", id)
	}
	if n := keys.keys.Load(); n != 2 {
		t.Fatalf("%d reads of the provider's keys 31 s on, want 2 (one more, then none)", n)
	}
	// Unsigned, and HMAC under a value an attacker knows.
	none := encodeSegment(t, map[string]any{"alg": "none", "typ": "JWT"}) + "." + encodeSegment(t, claims) + "."
	o.wantUnauthenticated(t, "alg none", none, "not valid", id)
	o.wantUnauthenticated(t, "HS256", signed(t, jose.HS256, []byte(kid+"-known-to-all-0123456789abcdef"), kid, claims), "not a token of the identity provider", id)

	// The provider's own tokens, for another application.
	other := o.providerToken(t, o.op.OtherClientID, o.op.OtherClientSecret, "/oidc/callback", "alice", "alice-pw")
	o.wantUnauthenticated(t, "another application's token", other, "issued for another application", id)
	// The command-line client's token, not accepted here (no api_audiences).
	cli := o.providerToken(t, o.op.CLIClientID, "", "/callback", "alice", "alice-pw")
	o.wantUnauthenticated(t, "the command-line client's token without api_audiences", cli, "issued for another application", id)
	// People the directory does not know, or knows only as an agent.
	o.wantUnauthenticated(t, "mallory", o.providerToken(t, o.op.ClientID, o.op.ClientSecret, "/oidc/callback", "mallory", "mallory-pw"), "does not know the account", id)
	o.wantUnauthenticated(t, "erin (an agent's tokens)", o.providerToken(t, o.op.ClientID, o.op.ClientSecret, "/oidc/callback", "erin", "erin-pw"), "nothing to do", id)
	// Expired: the provider's tokens live an hour.
	o.shift.Add(int64(61 * time.Minute))
	o.wantUnauthenticated(t, "alice's token, expired", real, "expired", id)
}

// maps is base with the keys of over replaced.
func maps(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// A person's provider token works on /v1 as the directory person it names,
// with what the directory gives them: alice reads and votes (her vote is
// hers, via api), but submits no review (an agent's role is a program's);
// a command-line client's token works once its id is in api_audiences;
// removed from the directory, her token stops at the next request; an
// event stream opened with it ends when it expires.
func TestOIDCBearerTokensActAsTheDirectoryPerson(t *testing.T) {
	o := setupOIDCWith(t, inbox.MatchSubject, false, func(oc *inbox.OIDC) {
		oc.APIAudiences = []string{"countersign-cli"}
	})
	o.applyInboxPolicy(t)
	id := o.refund(t, "run-bearer", "Globex", "", 120)
	o.tokens["alice-cli"] = o.providerToken(t, o.op.CLIClientID, "", "/callback", "alice", "alice-pw")

	var list struct {
		Items []struct {
			Record contracts.Record `json:"record"`
		} `json:"items"`
	}
	r := o.call(t, "GET", "/v1/approvals?status=pending", "alice-cli", nil)
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Items) != 1 || list.Items[0].Record.Request.EventID != id {
		t.Fatalf("alice's list: %d %s", r.status, r.body)
	}
	if r := o.call(t, "POST", "/v1/reviews", "alice-cli", map[string]any{"run": map[string]any{"id": "r", "agent": "billing-bot"}, "tool_calls": []any{}}); r.status != http.StatusForbidden {
		t.Fatalf("a review with a person's token: %d %s, want 403", r.status, r.body)
	}
	if r := o.call(t, "POST", "/v1/approvals/"+id+"/votes", "alice-cli", map[string]any{"decision": "approve", "comment": "from the terminal"}); r.status != http.StatusOK {
		t.Fatalf("alice's vote: %d %s", r.status, r.body)
	}
	rec := o.record(t, id)
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].Approver.ID != "alice" || rec.Votes[0].Approver.Via != contracts.ViaAPI {
		t.Fatalf("record: %+v", rec)
	}

	// An event stream ends when its token expires (the provider's last an hour).
	_, claims, _ := segments(t, o.tokens["alice-cli"])
	exp := time.Unix(int64(claims["exp"].(float64)), 0)
	o.shift.Store(int64(exp.Add(-2 * time.Second).Sub(time.Now())))
	req, _ := http.NewRequest("GET", o.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+o.tokens["alice-cli"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %d", resp.StatusCode)
	}
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		ended <- sc.Err()
	}()
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the event stream outlived its token by a minute")
	}
	if r := o.call(t, "GET", "/v1/approvals", "alice-cli", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("after expiry: %d, want 401", r.status)
	}

	// Removed from the directory: refused at the next request.
	o.shift.Store(0)
	o.tokens["alice-web"] = o.providerToken(t, o.op.ClientID, o.op.ClientSecret, "/oidc/callback", "alice", "alice-pw")
	if r := o.call(t, "GET", "/v1/approvals", "alice-web", nil); r.status != http.StatusOK {
		t.Fatalf("alice, listed: %d %s", r.status, r.body)
	}
	o.dir.set(t, strings.Replace(oidcDirectory, "  - {id: alice, email: alice@example.com, oidc_subject: sub-alice}\n", "", 1))
	if r := o.call(t, "GET", "/v1/approvals", "alice-web", nil); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "does not know the account") {
		t.Fatalf("alice, removed: %d %s", r.status, r.body)
	}
}

// With match: email, a token counts only with a verified email the
// directory knows: the command-line client's tokens carry the email
// claims, and alice's works while the alias account's (alice's address,
// unverified) is refused; the inbox client's tokens leave the claims to
// the userinfo endpoint, which a bearer token cannot reach, and are
// refused saying so.
func TestOIDCBearerTokensMatchedByEmail(t *testing.T) {
	o := setupOIDCWith(t, inbox.MatchEmail, false, func(oc *inbox.OIDC) {
		oc.APIAudiences = []string{"countersign-cli"}
	})
	o.applyInboxPolicy(t)
	id := o.refund(t, "run-bearer-email", "Globex", "", 120)
	o.tokens["alice-cli"] = o.providerToken(t, o.op.CLIClientID, "", "/callback", "alice", "alice-pw")
	if r := o.call(t, "GET", "/v1/approvals/"+id, "alice-cli", nil); r.status != http.StatusOK {
		t.Fatalf("alice by email: %d %s", r.status, r.body)
	}
	o.wantUnauthenticated(t, "an unverified email", o.providerToken(t, o.op.CLIClientID, "", "/callback", "alias", "alias-pw"), "did not vouch", id)
	o.wantUnauthenticated(t, "a token without the email claims", o.providerToken(t, o.op.ClientID, o.op.ClientSecret, "/oidc/callback", "alice", "alice-pw"), "lacks the claims", id)
}

// keyIssuer is an issuer whose signing key the test holds, serving only
// what a verifier of its tokens reads (discovery and keys), to craft
// tokens a provider would not issue.
type keyIssuer struct {
	url string
	key *rsa.PrivateKey
}

func startKeyIssuer(t *testing.T) *keyIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ki := &keyIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": ki.url, "authorization_endpoint": ki.url + "/auth", "token_endpoint": ki.url + "/token",
			"jwks_uri": ki.url + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ki.url = srv.URL
	return ki
}

// A provider's token must say when it was issued and live at most a day
// (a bearer JWT cannot be revoked before its exp), and a token for several
// audiences must name this API as its authorized party.
func TestOIDCBearerTokensMustBeShortLivedAndAddressedToUs(t *testing.T) {
	ki := startKeyIssuer(t)
	o := setupOIDCWith(t, inbox.MatchSubject, false, func(oc *inbox.OIDC) { oc.Issuer = ki.url })
	o.applyInboxPolicy(t)
	id := o.refund(t, "run-bearer-life", "Globex", "", 120)
	now := o.now()
	token := func(over map[string]any) string {
		c := maps(map[string]any{"iss": ki.url, "sub": "sub-alice", "aud": o.op.ClientID, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}, over)
		for k, v := range c {
			if v == nil {
				delete(c, k)
			}
		}
		return signed(t, jose.RS256, ki.key, "k1", c)
	}
	o.tokens["good"] = token(nil)
	if r := o.call(t, "GET", "/v1/approvals/"+id, "good", nil); r.status != http.StatusOK {
		t.Fatalf("a well-formed token: %d %s", r.status, r.body)
	}
	o.tokens["azp"] = token(map[string]any{"aud": []string{"another-app", o.op.ClientID}, "azp": o.op.ClientID})
	if r := o.call(t, "GET", "/v1/approvals/"+id, "azp", nil); r.status != http.StatusOK {
		t.Fatalf("a token for several audiences, issued to us: %d %s", r.status, r.body)
	}
	o.wantUnauthenticated(t, "a token for several audiences, issued to another", token(map[string]any{"aud": []string{"another-app", o.op.ClientID}, "azp": "another-app"}), "issued for another application", id)
	o.wantUnauthenticated(t, "a token for several audiences, no azp", token(map[string]any{"aud": []string{"another-app", o.op.ClientID}}), "issued for another application", id)
	o.wantUnauthenticated(t, "a token living 25 hours", token(map[string]any{"exp": now.Add(25 * time.Hour).Unix()}), "live at most 24h0m0s", id)
	o.wantUnauthenticated(t, "a token without iat", token(map[string]any{"iat": nil}), "say when it was issued", id)
	o.wantUnauthenticated(t, "another issuer's token", signed(t, jose.RS256, ki.key, "k1", map[string]any{"iss": o.op.Issuer, "sub": "sub-alice", "aud": o.op.ClientID, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}), "not a token of the identity provider", id)
}
