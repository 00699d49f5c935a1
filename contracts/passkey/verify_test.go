package passkey_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/contracts/passkey/passkeytest"
)

const (
	rpID   = "inbox.example.com"
	origin = "https://inbox.example.com"
)

var party = contracts.PasskeyParty{RPID: rpID, Origins: []string{origin}}

var at = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

func statement() passkey.Statement {
	return passkey.NewStatement("0193f1a4-7c1e-7d53-9b7a-8f3c2e1d0a01", "alice", "payments.send",
		strings.Repeat("ab", 32), contracts.DecisionApprove, "", at)
}

func TestStatementCanonicalFormIsStable(t *testing.T) {
	st := statement()
	want := `{"approver":"alice","arguments_sha256":"` + strings.Repeat("ab", 32) + `","at":"2026-12-06T12:00:00Z","decision":"approve","event_id":"0193f1a4-7c1e-7d53-9b7a-8f3c2e1d0a01","spec":"countersign.statement/v1","tool":"payments.send"}`
	if got := st.Canonical(); got != want {
		t.Fatalf("canonical\n got %s\nwant %s", got, want)
	}
	back, err := passkey.ParseStatement(want)
	if err != nil || back != st {
		t.Fatalf("parse: %+v %v", back, err)
	}
	for name, text := range map[string]string{
		"not canonical": strings.Replace(want, `{"approver"`, `{ "approver"`, 1),
		"unknown field": strings.Replace(want, `{"approver":"alice",`, `{"amount":"1","approver":"alice",`, 1),
		"other spec":    strings.Replace(want, "countersign.statement/v1", "countersign.statement/v2", 1),
		"bad time":      strings.Replace(want, "2026-12-06T12:00:00Z", "2026-12-06 12:00", 1),
		"no approver":   strings.Replace(want, `"approver":"alice",`, ``, 1),
	} {
		if _, err := passkey.ParseStatement(text); err == nil {
			t.Errorf("%s: parsed %s", name, text)
		}
	}
}

func TestVerifyAcceptsBothAlgorithms(t *testing.T) {
	for _, a := range []*passkeytest.Authenticator{
		passkeytest.NewES256(rpID, origin, []byte("alice")),
		passkeytest.NewEdDSA(rpID, origin, []byte("alice")),
	} {
		st, err := passkey.Verify(a.Sign(statement()), a.JWK(), party)
		if err != nil {
			t.Fatalf("%s: %v", a.JWK().Alg, err)
		}
		if st != statement() {
			t.Fatalf("%s: statement %+v", a.JWK().Alg, st)
		}
	}
}

func TestVerifyRefusesWithACode(t *testing.T) {
	a := passkeytest.NewES256(rpID, origin, []byte("alice"))
	other := passkeytest.NewES256(rpID, origin, []byte("mallory"))
	good := a.Sign(statement())
	otherStatement := statement()
	otherStatement.Tool = "payments.refund"
	mutate := func(f func(*contracts.PasskeyAssertion)) contracts.PasskeyAssertion {
		c := good
		f(&c)
		return c
	}
	noUV := passkeytest.NewES256(rpID, origin, []byte("alice"))
	noUV.Flags = 0x01
	wrongOrigin := passkeytest.NewES256(rpID, "https://evil.example", []byte("alice"))
	wrongRP := passkeytest.NewES256("evil.example", origin, []byte("alice"))
	for _, c := range []struct {
		name string
		a    contracts.PasskeyAssertion
		key  contracts.JWK
		code string
	}{
		{"another passkey's key", good, other.JWK(), contracts.ReasonPasskeyInvalid},
		{"statement swapped after signing", mutate(func(c *contracts.PasskeyAssertion) { c.Statement = otherStatement.Canonical() }), a.JWK(), contracts.ReasonPasskeyMismatch},
		{"challenge of another statement", a.SignText(statement().Canonical(), otherStatement.ChallengeB64()), a.JWK(), contracts.ReasonPasskeyMismatch},
		{"user not verified", noUV.Sign(statement()), a.JWK(), contracts.ReasonPasskeyInvalid},
		{"another origin", wrongOrigin.Sign(statement()), a.JWK(), contracts.ReasonPasskeyInvalid},
		{"another relying party", wrongRP.Sign(statement()), a.JWK(), contracts.ReasonPasskeyInvalid},
		{"signature cut", mutate(func(c *contracts.PasskeyAssertion) { c.Signature = c.Signature[:20] }), a.JWK(), contracts.ReasonPasskeyInvalid},
		{"not base64url", mutate(func(c *contracts.PasskeyAssertion) { c.AuthenticatorData = "***" }), a.JWK(), contracts.ReasonPasskeyInvalid},
		{"registration data, not an assertion", mutate(func(c *contracts.PasskeyAssertion) {
			raw, _ := base64.RawURLEncoding.DecodeString(c.ClientDataJSON)
			c.ClientDataJSON = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "webauthn.get", "webauthn.create", 1)))
		}), a.JWK(), contracts.ReasonPasskeyInvalid},
		{"the type in another case, signed", a.SignClientData(statement().Canonical(),
			[]byte(`{"type":"webauthn.create","Type":"webauthn.get","challenge":"`+statement().ChallengeB64()+`","origin":"`+origin+`"}`)), a.JWK(), contracts.ReasonPasskeyInvalid},
		{"an RSA key", good, contracts.JWK{Kty: "RSA", Alg: "RS256", X: "AQAB"}, contracts.ReasonPasskeyInvalid},
	} {
		_, err := passkey.Verify(c.a, c.key, party)
		if got := passkey.CodeOf(err); err == nil || got != c.code {
			t.Errorf("%s: got %v (%s), want %s", c.name, err, got, c.code)
		}
	}
}

func TestFreshAndExpect(t *testing.T) {
	st := statement()
	if err := passkey.Fresh(st, at.Add(passkey.MaxAge), passkey.MaxAge); err != nil {
		t.Fatalf("at the edge: %v", err)
	}
	for name, now := range map[string]time.Time{
		"too old":   at.Add(passkey.MaxAge + time.Second),
		"in future": at.Add(-passkey.ClockSkew - time.Second),
	} {
		if err := passkey.Fresh(st, now, passkey.MaxAge); passkey.CodeOf(err) != contracts.ReasonPasskeyStale {
			t.Errorf("%s: %v", name, err)
		}
	}
	want := passkey.Expected{EventID: st.EventID, Approver: "alice", Tool: st.Tool, ArgumentsSHA256: st.ArgumentsSHA256, Decision: contracts.DecisionApprove}
	if err := passkey.Expect(st, want); err != nil {
		t.Fatal(err)
	}
	want.Decision = contracts.DecisionReject
	if err := passkey.Expect(st, want); passkey.CodeOf(err) != contracts.ReasonPasskeyMismatch {
		t.Fatalf("another decision: %v", err)
	}
}

func TestStatementHoldsOnlyStrings(t *testing.T) {
	// Every field a string: the canonical form is then the same in every
	// language's JSON, which the TypeScript and Python verifiers rely on.
	var m map[string]any
	if err := json.Unmarshal([]byte(statement().Canonical()), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if _, ok := v.(string); !ok {
			t.Errorf("%s is %T", k, v)
		}
	}
}
