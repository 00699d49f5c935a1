// Package passkeytest is a software WebAuthn authenticator for tests: it
// holds a passkey (ES256 or EdDSA) bound to one relying party and makes
// assertions over approval statements exactly as a browser and a platform
// authenticator do (client data JSON, authenticator data, signature), so
// the arbiter, the API and the receipt verifiers can be tested without a
// browser. The real-browser tests use Chromium's virtual authenticator.
package passkeytest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
)

var b64 = base64.RawURLEncoding

// Authenticator is one passkey.
type Authenticator struct {
	RPID   string
	Origin string
	// ID is the credential id (base64url).
	ID    string
	ec    *ecdsa.PrivateKey
	ed    ed25519.PrivateKey
	count uint32
	// Flags are the authenticator data flags (default user present and
	// verified, 0x05); a test clears UV to play an authenticator that did
	// not verify the user.
	Flags byte
	// Rand is the randomness of ES256 signatures (default crypto/rand).
	Rand io.Reader
}

// NewES256 is a P-256 passkey for rpID, used from origin; seed makes its
// key and id repeatable (any bytes).
func NewES256(rpID, origin string, seed []byte) *Authenticator {
	d := sha256.Sum256(append([]byte("es256 "), seed...))
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
	if err != nil {
		panic(err) // a 32-byte SHA-256 is a valid scalar but for a 2^-128 chance
	}
	return &Authenticator{RPID: rpID, Origin: origin, ID: credID(seed), ec: k, Flags: 0x05}
}

// NewEdDSA is an Ed25519 passkey for rpID, used from origin.
func NewEdDSA(rpID, origin string, seed []byte) *Authenticator {
	d := sha256.Sum256(append([]byte("eddsa "), seed...))
	return &Authenticator{RPID: rpID, Origin: origin, ID: credID(append([]byte("ed "), seed...)), ed: ed25519.NewKeyFromSeed(d[:]), Flags: 0x05}
}

func credID(seed []byte) string {
	sum := sha256.Sum256(append([]byte("credential "), seed...))
	return b64.EncodeToString(sum[:16])
}

// JWK is the passkey's public key.
func (a *Authenticator) JWK() contracts.JWK {
	if a.ed != nil {
		return contracts.JWK{Kty: "OKP", Crv: "Ed25519", Alg: "EdDSA", X: b64.EncodeToString(a.ed.Public().(ed25519.PublicKey))}
	}
	pub, err := a.ec.PublicKey.Bytes()
	if err != nil {
		panic(err)
	}
	return contracts.JWK{Kty: "EC", Crv: "P-256", Alg: "ES256", X: b64.EncodeToString(pub[1:33]), Y: b64.EncodeToString(pub[33:])}
}

// Passkey is the credential as the API stores it for a person.
func (a *Authenticator) Passkey(name string) contracts.Passkey {
	return contracts.Passkey{ID: a.ID, Name: name, PublicKey: a.JWK()}
}

// Sign asserts st as the browser would for the inbox at a.Origin.
func (a *Authenticator) Sign(st passkey.Statement) contracts.PasskeyAssertion {
	return a.SignText(st.Canonical(), st.ChallengeB64())
}

// SignText asserts statement text with the given challenge (base64url): a
// test makes a challenge that is not the statement's this way.
func (a *Authenticator) SignText(statement, challenge string) contracts.PasskeyAssertion {
	client, _ := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": challenge, "origin": a.Origin, "crossOrigin": false})
	return a.SignClientData(statement, client)
}

// SignClientData signs client data given as it is: a test makes client
// data no browser would.
func (a *Authenticator) SignClientData(statement string, client []byte) contracts.PasskeyAssertion {
	rp := sha256.Sum256([]byte(a.RPID))
	a.count++
	auth := append(rp[:], a.Flags)
	auth = binary.BigEndian.AppendUint32(auth, a.count)
	ch := sha256.Sum256(client)
	signed := append(append([]byte{}, auth...), ch[:]...)
	var sig []byte
	if a.ed != nil {
		sig = ed25519.Sign(a.ed, signed)
	} else {
		r := a.Rand
		if r == nil {
			r = rand.Reader
		}
		sum := sha256.Sum256(signed)
		var err error
		if sig, err = ecdsa.SignASN1(r, a.ec, sum[:]); err != nil {
			panic(err)
		}
	}
	return contracts.PasskeyAssertion{
		Statement: statement, CredentialID: a.ID, AuthenticatorData: b64.EncodeToString(auth),
		ClientDataJSON: b64.EncodeToString(client), Signature: b64.EncodeToString(sig),
	}
}
