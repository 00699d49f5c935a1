package passkey

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/countersign/countersign/contracts"
)

// Error is a refused assertion: Code is one of the contract's refusal
// reasons (contracts.ReasonPasskeyInvalid, ...), Detail says what failed.
type Error struct {
	Code   string
	Detail string
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

func fail(code, format string, a ...any) error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, a...)}
}

// CodeOf is the refusal code of err (ReasonPasskeyInvalid for an error of
// another kind).
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return contracts.ReasonPasskeyInvalid
}

// WebAuthn authenticator data flags.
const (
	flagUserPresent  = 0x01
	flagUserVerified = 0x04
)

// Verify checks that a is a valid WebAuthn assertion, by the credential
// whose public key is key, bound to party, over the statement it carries,
// and returns that statement. The checks: the statement is canonical; the
// client data is of type webauthn.get, its challenge is the statement's
// SHA-256, its origin one of party's and not cross-origin; the
// authenticator data is for party's RP ID with the user present and
// verified; the signature over the authenticator data and the client
// data's hash verifies with key. It does not check what the statement
// says (see Expect) nor when (see Fresh).
func Verify(a contracts.PasskeyAssertion, key contracts.JWK, party contracts.PasskeyParty) (Statement, error) {
	st, err := ParseStatement(a.Statement)
	if err != nil {
		return Statement{}, fail(contracts.ReasonPasskeyInvalid, "%v", err)
	}
	pub, err := PublicKey(key)
	if err != nil {
		return Statement{}, fail(contracts.ReasonPasskeyInvalid, "%v", err)
	}
	auth, err1 := decodeB64(a.AuthenticatorData)
	client, err2 := decodeB64(a.ClientDataJSON)
	sig, err3 := decodeB64(a.Signature)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Statement{}, fail(contracts.ReasonPasskeyInvalid, "authenticator_data, client_data_json and signature must be base64url")
	}
	if err := checkClientData(client, st, party); err != nil {
		return Statement{}, err
	}
	if err := checkAuthenticatorData(auth, party.RPID); err != nil {
		return Statement{}, err
	}
	clientHash := sha256.Sum256(client)
	signed := append(slices.Clip(auth), clientHash[:]...)
	if !verifySignature(pub, signed, sig) {
		return Statement{}, fail(contracts.ReasonPasskeyInvalid, "the signature does not verify with the passkey's public key")
	}
	return st, nil
}

type clientData struct {
	Type, Challenge, Origin string
	CrossOrigin             bool
}

func checkClientData(data []byte, st Statement, party contracts.PasskeyParty) error {
	if err := contracts.CheckDuplicateKeys(data); err != nil {
		return fail(contracts.ReasonPasskeyInvalid, "client data: %v", err)
	}
	// Fields are read by their exact names (encoding/json would match
	// "Type" for "type"), as the TypeScript and Python verifiers read them.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return fail(contracts.ReasonPasskeyInvalid, "client data is not a JSON object: %v", err)
	}
	var cd clientData
	for name, dst := range map[string]any{"type": &cd.Type, "challenge": &cd.Challenge, "origin": &cd.Origin, "crossOrigin": &cd.CrossOrigin} {
		if raw, ok := fields[name]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return fail(contracts.ReasonPasskeyInvalid, "client data %s: %v", name, err)
			}
		}
	}
	if cd.Type != "webauthn.get" {
		return fail(contracts.ReasonPasskeyInvalid, "client data type %q, want webauthn.get", cd.Type)
	}
	got, err := decodeB64(cd.Challenge)
	if err != nil || subtle.ConstantTimeCompare(got, st.Challenge()) != 1 {
		return fail(contracts.ReasonPasskeyMismatch, "the assertion's challenge is not the SHA-256 of the statement it carries")
	}
	if !slices.Contains(party.Origins, cd.Origin) {
		return fail(contracts.ReasonPasskeyInvalid, "origin %q is not one of the inbox's", cd.Origin)
	}
	if cd.CrossOrigin {
		return fail(contracts.ReasonPasskeyInvalid, "the assertion was made in a cross-origin frame")
	}
	return nil
}

func checkAuthenticatorData(auth []byte, rpID string) error {
	if len(auth) < 37 {
		return fail(contracts.ReasonPasskeyInvalid, "authenticator data is %d bytes, at least 37 expected", len(auth))
	}
	want := sha256.Sum256([]byte(rpID))
	if subtle.ConstantTimeCompare(auth[:32], want[:]) != 1 {
		return fail(contracts.ReasonPasskeyInvalid, "the assertion is for another relying party than %q", rpID)
	}
	flags := auth[32]
	if flags&flagUserPresent == 0 || flags&flagUserVerified == 0 {
		return fail(contracts.ReasonPasskeyInvalid, "the authenticator did not verify the user (flags %#02x)", flags)
	}
	return nil
}

// PublicKey parses a passkey's JWK: EC P-256 (ES256) or OKP Ed25519
// (EdDSA). A point off the curve is an error.
func PublicKey(k contracts.JWK) (any, error) {
	x, errX := decodeB64(k.X)
	switch {
	case k.Kty == "EC" && k.Crv == "P-256" && (k.Alg == "" || k.Alg == "ES256"):
		y, errY := decodeB64(k.Y)
		if errX != nil || errY != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("public key: x and y must be 32 bytes of base64url")
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, fmt.Errorf("public key: %v", err)
		}
		return pub, nil
	case k.Kty == "OKP" && k.Crv == "Ed25519" && (k.Alg == "" || k.Alg == "EdDSA"):
		if errX != nil || len(x) != ed25519.PublicKeySize || k.Y != "" {
			return nil, errors.New("public key: x must be 32 bytes of base64url")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("public key: kty %q crv %q alg %q is not ES256 (EC P-256) or EdDSA (OKP Ed25519)", k.Kty, k.Crv, k.Alg)
}

func verifySignature(pub any, signed, sig []byte) bool {
	switch pub := pub.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(signed)
		return ecdsa.VerifyASN1(pub, sum[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(pub, signed, sig)
	}
	return false
}

func decodeB64(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	return base64.RawURLEncoding.Strict().DecodeString(s)
}

// Expected is what a statement must say to count for one decision.
type Expected struct {
	EventID, Approver, Tool, ArgumentsSHA256, Decision, EditedArgumentsSHA256 string
}

// Expect checks that st says exactly what want says.
func Expect(st Statement, want Expected) error {
	for _, f := range []struct{ name, got, want string }{
		{"event_id", st.EventID, want.EventID}, {"approver", st.Approver, want.Approver},
		{"tool", st.Tool, want.Tool}, {"arguments_sha256", st.ArgumentsSHA256, want.ArgumentsSHA256},
		{"decision", st.Decision, want.Decision}, {"edited_arguments_sha256", st.EditedArgumentsSHA256, want.EditedArgumentsSHA256},
	} {
		if f.got != f.want {
			return fail(contracts.ReasonPasskeyMismatch, "the statement's %s is %q, this vote's is %q", f.name, f.got, f.want)
		}
	}
	return nil
}

// Fresh checks that st was made within maxAge before now, and not more
// than ClockSkew after it.
func Fresh(st Statement, now time.Time, maxAge time.Duration) error {
	t, err := st.Time()
	if err != nil {
		return fail(contracts.ReasonPasskeyInvalid, "%v", err)
	}
	if t.After(now.Add(ClockSkew)) {
		return fail(contracts.ReasonPasskeyStale, "the statement is dated %s, in the future", st.At)
	}
	if now.Sub(t) > maxAge {
		return fail(contracts.ReasonPasskeyStale, "the statement is dated %s, more than %s ago", st.At, maxAge)
	}
	return nil
}

// Find returns the credential of keys with id, if keys has it; revoked
// ones too (the caller refuses them).
func Find(keys *contracts.Passkeys, id string) (contracts.Passkey, bool) {
	if keys == nil {
		return contracts.Passkey{}, false
	}
	for _, c := range keys.Credentials {
		if subtle.ConstantTimeCompare([]byte(c.ID), []byte(id)) == 1 {
			return c, true
		}
	}
	return contracts.Passkey{}, false
}

// KeyName is the key of person's passkeys in contracts.BucketPasskeys: the
// hex SHA-256 of the id, so that any id is a valid key.
func KeyName(person string) string {
	sum := sha256.Sum256([]byte(person))
	var b bytes.Buffer
	b.WriteString("p.")
	for _, c := range sum {
		fmt.Fprintf(&b, "%02x", c)
	}
	return b.String()
}

// Of reads data as person's passkeys, the value under KeyName(person):
// false for anything else (another person's, a version this release does
// not read, or no passkeys value at all). Owned tells which of these a
// reader may skip.
func Of(person string, data []byte) (contracts.Passkeys, bool) {
	var keys contracts.Passkeys
	if json.Unmarshal(data, &keys) != nil || keys.Spec != contracts.SpecPasskeys || keys.Person != person {
		return contracts.Passkeys{}, false
	}
	return keys, true
}

// Owned reports whether data is a passkeys value of person, in any
// version (contracts.Owned).
func Owned(person string, data []byte) bool {
	return contracts.Owned(data, contracts.SpecPasskeys, "person", person)
}

// OwnedByKey reports whether data is a passkeys value of the person key
// is of, in any version.
func OwnedByKey(key string, data []byte) bool {
	var named struct {
		Person string `json:"person"`
	}
	return json.Unmarshal(data, &named) == nil && KeyName(named.Person) == key && Owned(named.Person, data)
}

// PartyOf reads data as the relying party (the value under
// contracts.PasskeyPartyKey): false for anything else.
func PartyOf(data []byte) (contracts.PasskeyParty, bool) {
	var party contracts.PasskeyParty
	if json.Unmarshal(data, &party) != nil || party.Spec != contracts.SpecPasskeyParty || party.RPID == "" {
		return contracts.PasskeyParty{}, false
	}
	return party, true
}

// OwnedParty reports whether data is a relying party value, in any
// version.
func OwnedParty(data []byte) bool {
	return contracts.Owned(data, contracts.SpecPasskeyParty, "", "")
}
