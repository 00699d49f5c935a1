package contracts

import "time"

// StepUpPasskey is the step_up a rule (or a risk tier) may ask for: an
// approval counts only with a fresh WebAuthn assertion, by one of the
// approver's enrolled passkeys, over the approval statement of exactly the
// call that runs (see contracts/passkey). The request carries it
// (ApprovalRequested.StepUp), checked against the policy by the arbiter.
const StepUpPasskey = "passkey"

// ValidStepUp reports whether s is a step_up a request may carry ("" is
// none).
func ValidStepUp(s string) bool { return s == "" || s == StepUpPasskey }

// BucketPasskeys holds each person's enrolled passkeys (the public keys
// only) and the relying party they are bound to: key PasskeysKey(person)
// and PasskeyPartyKey. Written by the API role only; the arbiter reads a
// person's passkeys at the moment it counts their vote, so a revoked
// passkey stops counting at once.
const BucketPasskeys = "hitl_passkeys"

// PasskeyPartyKey is the key of the relying party (PasskeyParty) in
// BucketPasskeys.
const PasskeyPartyKey = "party"

// SpecPasskeys and SpecPasskeyParty name the values of BucketPasskeys.
const (
	SpecPasskeys     = "countersign.passkeys/v1"
	SpecPasskeyParty = "countersign.passkey-party/v1"
)

// PasskeyAssertion is a WebAuthn assertion over an approval statement: what
// a vote carries to meet step_up passkey, kept in the record's vote and
// copied into the receipt. Binary fields are base64url without padding, as
// the browser's PublicKeyCredential gives them.
type PasskeyAssertion struct {
	// Statement is the approval statement's canonical JSON (RFC 8785); the
	// assertion's challenge is its SHA-256.
	Statement         string `json:"statement"`
	CredentialID      string `json:"credential_id"`
	AuthenticatorData string `json:"authenticator_data"`
	ClientDataJSON    string `json:"client_data_json"`
	Signature         string `json:"signature"`
}

// MaxPasskeyAssertionBytes bounds a vote's passkey assertion, all its
// fields together: a statement is some 400 bytes, the WebAuthn parts a few
// hundred more.
const MaxPasskeyAssertionBytes = 8 << 10

func (a *PasskeyAssertion) size() int {
	return len(a.Statement) + len(a.CredentialID) + len(a.AuthenticatorData) + len(a.ClientDataJSON) + len(a.Signature)
}

// PasskeyParty is the WebAuthn relying party every passkey is bound to:
// the RP ID (a host name) and the origins the inbox is served from.
type PasskeyParty struct {
	Spec      string    `json:"spec"`
	RPID      string    `json:"rp_id"`
	Origins   []string  `json:"origins"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Passkeys is one person's enrolled passkeys.
type Passkeys struct {
	Spec string `json:"spec"`
	// Person is the directory id the passkeys belong to.
	Person      string    `json:"person"`
	Credentials []Passkey `json:"credentials"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Passkey is one enrolled credential. A revoked one stays listed, with
// RevokedAt, so that every verifier refuses it.
type Passkey struct {
	// ID is the credential id (base64url).
	ID string `json:"id"`
	// Name is what the person called it ("laptop", "phone").
	Name string `json:"name"`
	// PublicKey is the credential's public key as a JWK (RFC 7517): EC
	// P-256 (ES256) or OKP Ed25519 (EdDSA).
	PublicKey JWK `json:"public_key"`
	// AAGUID identifies the authenticator's model (hex; zeros when it does
	// not say).
	AAGUID     string     `json:"aaguid,omitempty"`
	Transports []string   `json:"transports,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	RevokedBy  string     `json:"revoked_by,omitempty"`
}

// Revoked reports whether the passkey was revoked.
func (p Passkey) Revoked() bool { return p.RevokedAt != nil }

// JWK is a public key in JSON Web Key form: kty EC (crv P-256, x, y) or OKP
// (crv Ed25519, x). Alg is ES256 or EdDSA.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	Alg string `json:"alg"`
	X   string `json:"x"`
	Y   string `json:"y,omitempty"`
}
