package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/events"
)

// PasskeyConfig binds passkeys to the inbox: the WebAuthn relying party.
// Without an RPID, passkeys are off: nobody can enrol, and a rule that
// says step_up passkey can only be rejected.
type PasskeyConfig struct {
	// RPID is the relying party id: the inbox's host name (or a parent
	// domain of it), e.g. countersign.example.com.
	RPID string
	// RPName is shown by the browser when enrolling (default Countersign).
	RPName string
	// Origins are the inbox's origins (scheme://host[:port]) an assertion
	// may come from.
	Origins []string
}

// Codes of the passkey endpoints.
const (
	CodePasskeysOff         = "passkeys_off"
	CodeEnrolmentExpired    = "enrolment_expired"
	CodeEnrolmentInvalid    = "enrolment_invalid"
	CodeUnknownPasskey      = "unknown_passkey"
	CodeStepUpNotApplicable = "step_up_not_applicable"
)

// enrolmentTTL is how long an enrolment may take between its options and
// the authenticator's answer.
const enrolmentTTL = 5 * time.Minute

// enrolmentPrefix keys an enrolment in progress in hitl_sessions.
const enrolmentPrefix = "passkey-enrol."

// passkeys is the passkey side of the API.
type passkeys struct {
	mu  sync.Mutex
	kv  jetstream.KeyValue
	wa  *webauthn.WebAuthn
	doc struct {
		token string
		at    time.Time
	}
}

func (c PasskeyConfig) enabled() bool { return c.RPID != "" }

// validate checks c when set.
func (c PasskeyConfig) validate() error {
	if !c.enabled() {
		if len(c.Origins) > 0 {
			return errors.New("api: Passkeys.Origins is set without Passkeys.RPID")
		}
		return nil
	}
	if len(c.Origins) == 0 {
		return errors.New("api: Passkeys.Origins is required with Passkeys.RPID")
	}
	for _, o := range c.Origins {
		if !strings.HasPrefix(o, "https://") && !strings.HasPrefix(o, "http://localhost") {
			return fmt.Errorf("api: passkey origin %q must be https:// (or http://localhost for development)", o)
		}
	}
	return nil
}

// Party is the relying party passkeys are bound to; false when passkeys
// are off.
func (s *Server) Party() (contracts.PasskeyParty, bool) {
	c := s.cfg.Passkeys
	if !c.enabled() {
		return contracts.PasskeyParty{}, false
	}
	return contracts.PasskeyParty{Spec: contracts.SpecPasskeyParty, RPID: c.RPID, Origins: slices.Clone(c.Origins)}, true
}

func (s *Server) passkeysBucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.pk.mu.Lock()
	defer s.pk.mu.Unlock()
	if s.pk.kv == nil {
		kv, err := s.cfg.JS.KeyValue(ctx, contracts.BucketPasskeys)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", contracts.BucketPasskeys, err)
		}
		s.pk.kv = kv
	}
	return s.pk.kv, nil
}

// publishParty writes the relying party the arbiter checks assertions
// against, when it is not already the one written.
func (s *Server) publishParty(ctx context.Context) error {
	party, ok := s.Party()
	if !ok {
		return nil
	}
	kv, err := s.passkeysBucket(ctx)
	if err != nil {
		return err
	}
	party.UpdatedAt = s.cfg.Now().UTC()
	data, _ := json.Marshal(party)
	// A roll-up over the key's last revision (another replica publishing
	// at the same time moves it, and the party is read again).
	_, err = events.PutUnlessSame(ctx, s.cfg.JS, kv, contracts.BucketPasskeys, contracts.PasskeyPartyKey, data, func(v []byte) bool {
		cur, ok := passkey.PartyOf(v)
		return ok && cur.RPID == party.RPID && slices.Equal(cur.Origins, party.Origins)
	})
	if err != nil {
		return fmt.Errorf("publish the passkey relying party: %w", err)
	}
	return nil
}

func (s *Server) webAuthn() (*webauthn.WebAuthn, *Error) {
	c := s.cfg.Passkeys
	if !c.enabled() {
		return nil, errorf(http.StatusNotFound, CodePasskeysOff, "passkeys are not set up on this server (passkeys.rp_id)")
	}
	s.pk.mu.Lock()
	defer s.pk.mu.Unlock()
	if s.pk.wa == nil {
		wa, err := webauthn.New(&webauthn.Config{RPID: c.RPID, RPDisplayName: cmpOr(c.RPName, "Countersign"), RPOrigins: c.Origins})
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, CodeInternal, "passkeys: %v", err)
		}
		s.pk.wa = wa
	}
	return s.pk.wa, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// PasskeysOf returns person's passkeys (revoked ones included) and the
// revision of their entry (0 when there is none).
func (s *Server) PasskeysOf(ctx context.Context, person string) (contracts.Passkeys, uint64, *Error) {
	empty := contracts.Passkeys{Spec: contracts.SpecPasskeys, Person: person, Credentials: []contracts.Passkey{}}
	kv, err := s.passkeysBucket(ctx)
	if err != nil {
		return empty, 0, s.backendError("open the passkeys", err)
	}
	// What the NATS server stored on the key as its answer to someone's
	// request is not taken: the newest value the API wrote stands, and
	// the next write replaces it (events.NewestReadable).
	r, err := events.NewestReadable(ctx, s.cfg.JS, kv, contracts.BucketPasskeys, passkey.KeyName(person), func(data []byte) bool {
		return passkey.Owned(person, data)
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return empty, 0, nil
	}
	if err != nil {
		return empty, 0, s.backendError("read the passkeys", err)
	}
	if r.Value == nil {
		return empty, r.Last, nil
	}
	keys, ok := passkey.Of(person, r.Value)
	if !ok {
		return empty, 0, errorf(http.StatusInternalServerError, CodeInternal, "the passkeys of %s cannot be read", person)
	}
	return keys, r.Last, nil
}

// savePasskeys writes keys with compare-and-set on rev (0: create).
func (s *Server) savePasskeys(ctx context.Context, keys contracts.Passkeys, rev uint64) error {
	keys.Spec, keys.UpdatedAt = contracts.SpecPasskeys, s.cfg.Now().UTC()
	data, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	// Over rev as a roll-up: the bucket takes a second value on a key only
	// so (events.PasskeysBucketConfig).
	_, err = events.UpdateKey(ctx, s.cfg.JS, contracts.BucketPasskeys, passkey.KeyName(keys.Person), data, rev)
	if err == nil {
		s.pk.mu.Lock()
		s.pk.doc.token = "" // the approvers document changes
		s.pk.mu.Unlock()
	}
	return err
}

// webauthnUser is a person as WebAuthn sees them: an opaque user handle
// (the SHA-256 of the id), the id as name, and their passkeys.
type webauthnUser struct {
	id    string
	creds []webauthn.Credential
}

func (u webauthnUser) WebAuthnID() []byte {
	sum := sha256.Sum256([]byte(u.id))
	return sum[:]
}
func (u webauthnUser) WebAuthnName() string                       { return u.id }
func (u webauthnUser) WebAuthnDisplayName() string                { return u.id }
func (u webauthnUser) WebAuthnCredentials() []webauthn.Credential { return u.creds }

// enrolment is an enrolment in progress, kept in hitl_sessions.
type enrolment struct {
	Person  string               `json:"person"`
	Session webauthn.SessionData `json:"session"`
	Expires time.Time            `json:"expires"`
}

// BeginPasskeyEnrolment starts enrolling a passkey for p: the options to
// pass to navigator.credentials.create (as JSON, base64url for binary) and
// the id that FinishPasskeyEnrolment takes back. Only ES256 and EdDSA
// keys are asked for, with user verification, and none of the person's
// enrolled authenticators again.
func (s *Server) BeginPasskeyEnrolment(ctx context.Context, p *Principal) (json.RawMessage, string, *Error) {
	wa, aerr := s.webAuthn()
	if aerr != nil {
		return nil, "", aerr
	}
	keys, _, aerr := s.PasskeysOf(ctx, p.Subject)
	if aerr != nil {
		return nil, "", aerr
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range keys.Credentials {
		if id, err := base64.RawURLEncoding.DecodeString(c.ID); err == nil {
			exclude = append(exclude, protocol.CredentialDescriptor{Type: protocol.PublicKeyCredentialType, CredentialID: id})
		}
	}
	creation, session, err := wa.BeginRegistration(webauthnUser{id: p.Subject},
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementPreferred, UserVerification: protocol.VerificationRequired,
		}),
		webauthn.WithCredentialParameters([]protocol.CredentialParameter{
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgES256},
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgEdDSA},
		}),
		webauthn.WithConveyancePreference(protocol.PreferNoAttestation),
		webauthn.WithExclusions(exclude),
	)
	if err != nil {
		return nil, "", errorf(http.StatusInternalServerError, CodeInternal, "passkey enrolment: %v", err)
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	id := base64.RawURLEncoding.EncodeToString(raw[:])
	data, _ := json.Marshal(enrolment{Person: p.Subject, Session: *session, Expires: s.cfg.Now().Add(enrolmentTTL).UTC()})
	sessions, err := s.cfg.JS.KeyValue(ctx, contracts.BucketSessions)
	if err == nil {
		_, err = sessions.Create(ctx, enrolmentPrefix+id, data)
	}
	if err != nil {
		return nil, "", s.backendError("store the enrolment", err)
	}
	options, _ := json.Marshal(creation.Response)
	return options, id, nil
}

// FinishPasskeyEnrolment checks the authenticator's answer to the
// enrolment id started for p and enrols the passkey under name.
func (s *Server) FinishPasskeyEnrolment(ctx context.Context, p *Principal, id, name string, response []byte) (contracts.Passkey, *Error) {
	wa, aerr := s.webAuthn()
	if aerr != nil {
		return contracts.Passkey{}, aerr
	}
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 64 {
		return contracts.Passkey{}, fieldError(http.StatusBadRequest, CodeInvalidField, "name", "name the passkey (1 to 64 characters), e.g. laptop or phone")
	}
	e, aerr := s.takeEnrolment(ctx, id)
	if aerr != nil {
		return contracts.Passkey{}, aerr
	}
	if e.Person != p.Subject || !s.cfg.Now().Before(e.Expires) {
		return contracts.Passkey{}, errorf(http.StatusBadRequest, CodeEnrolmentExpired, "this enrolment has expired or is someone else's; start again")
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(response)
	if err != nil {
		return contracts.Passkey{}, errorf(http.StatusBadRequest, CodeEnrolmentInvalid, "the authenticator's answer cannot be read: %v", err)
	}
	cred, err := wa.CreateCredential(webauthnUser{id: p.Subject}, e.Session, parsed)
	if err != nil {
		return contracts.Passkey{}, errorf(http.StatusBadRequest, CodeEnrolmentInvalid, "the authenticator's answer does not verify: %v", err)
	}
	jwk, err := jwkOf(cred.PublicKey)
	if err != nil {
		return contracts.Passkey{}, errorf(http.StatusBadRequest, CodeEnrolmentInvalid, "%v", err)
	}
	pk := contracts.Passkey{
		ID: base64.RawURLEncoding.EncodeToString(cred.ID), Name: name, PublicKey: jwk,
		AAGUID: fmt.Sprintf("%x", cred.Authenticator.AAGUID), CreatedAt: s.cfg.Now().UTC(),
	}
	for _, t := range cred.Transport {
		pk.Transports = append(pk.Transports, string(t))
	}
	for attempt := 0; ; attempt++ {
		keys, rev, aerr := s.PasskeysOf(ctx, p.Subject)
		if aerr != nil {
			return contracts.Passkey{}, aerr
		}
		if _, dup := passkey.Find(&keys, pk.ID); dup {
			return contracts.Passkey{}, errorf(http.StatusConflict, CodeEnrolmentInvalid, "this passkey is enrolled already")
		}
		keys.Credentials = append(keys.Credentials, pk)
		err := s.savePasskeys(ctx, keys, rev)
		if err == nil {
			s.log.Info("passkey enrolled", "person", p.Subject, "credential_id", pk.ID, "name", pk.Name)
			return pk, nil
		}
		if attempt >= 3 || !isConflict(err) {
			return contracts.Passkey{}, s.backendError("store the passkey", err)
		}
	}
}

// takeEnrolment reads and deletes the enrolment id: an answer is checked
// once.
func (s *Server) takeEnrolment(ctx context.Context, id string) (enrolment, *Error) {
	var e enrolment
	if len(id) != 43 {
		return e, errorf(http.StatusBadRequest, CodeEnrolmentExpired, "unknown enrolment; start again")
	}
	sessions, err := s.cfg.JS.KeyValue(ctx, contracts.BucketSessions)
	if err != nil {
		return e, s.backendError("open the sessions", err)
	}
	entry, err := sessions.Get(ctx, enrolmentPrefix+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return e, errorf(http.StatusBadRequest, CodeEnrolmentExpired, "unknown or used enrolment; start again")
	}
	if err != nil {
		return e, s.backendError("read the enrolment", err)
	}
	if err := sessions.Purge(ctx, enrolmentPrefix+id, jetstream.LastRevision(entry.Revision())); err != nil {
		return e, errorf(http.StatusBadRequest, CodeEnrolmentExpired, "this enrolment was used already; start again")
	}
	if err := json.Unmarshal(entry.Value(), &e); err != nil {
		return e, errorf(http.StatusBadRequest, CodeEnrolmentExpired, "unknown enrolment; start again")
	}
	return e, nil
}

// isConflict reports whether a compare-and-set lost to another write.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// jwkOf turns a credential's COSE public key into the JWK every verifier
// reads: ES256 (EC P-256) or EdDSA (OKP Ed25519), nothing else.
func jwkOf(cose []byte) (contracts.JWK, error) {
	key, err := webauthncose.ParsePublicKey(cose)
	if err != nil {
		return contracts.JWK{}, fmt.Errorf("the passkey's public key cannot be read: %v", err)
	}
	b64 := base64.RawURLEncoding
	var jwk contracts.JWK
	switch k := key.(type) {
	case webauthncose.EC2PublicKeyData:
		if webauthncose.COSEAlgorithmIdentifier(k.Algorithm) != webauthncose.AlgES256 || len(k.XCoord) != 32 || len(k.YCoord) != 32 {
			return contracts.JWK{}, errors.New("only ES256 (P-256) and EdDSA (Ed25519) passkeys are accepted")
		}
		jwk = contracts.JWK{Kty: "EC", Crv: "P-256", Alg: "ES256", X: b64.EncodeToString(k.XCoord), Y: b64.EncodeToString(k.YCoord)}
	case webauthncose.OKPPublicKeyData:
		if webauthncose.COSEAlgorithmIdentifier(k.Algorithm) != webauthncose.AlgEdDSA {
			return contracts.JWK{}, errors.New("only ES256 (P-256) and EdDSA (Ed25519) passkeys are accepted")
		}
		jwk = contracts.JWK{Kty: "OKP", Crv: "Ed25519", Alg: "EdDSA", X: b64.EncodeToString(k.XCoord)}
	default:
		return contracts.JWK{}, errors.New("only ES256 (P-256) and EdDSA (Ed25519) passkeys are accepted")
	}
	if _, err := passkey.PublicKey(jwk); err != nil {
		return contracts.JWK{}, err
	}
	return jwk, nil
}

// RevokePasskey revokes person's passkey id, by p: the person themself or
// an admin. A revoked passkey stays listed, marked, so that the arbiter
// and every verifier refuse it from now on.
func (s *Server) RevokePasskey(ctx context.Context, p *Principal, person, id string) (contracts.Passkey, *Error) {
	if person != p.Subject && !p.Has(RoleAdmin) {
		return contracts.Passkey{}, errorf(http.StatusNotFound, CodeUnknownPasskey, "no such passkey")
	}
	for attempt := 0; ; attempt++ {
		keys, rev, aerr := s.PasskeysOf(ctx, person)
		if aerr != nil {
			return contracts.Passkey{}, aerr
		}
		i := slices.IndexFunc(keys.Credentials, func(c contracts.Passkey) bool { return c.ID == id })
		if i < 0 {
			return contracts.Passkey{}, errorf(http.StatusNotFound, CodeUnknownPasskey, "no such passkey")
		}
		if keys.Credentials[i].Revoked() {
			return keys.Credentials[i], nil
		}
		now := s.cfg.Now().UTC()
		keys.Credentials[i].RevokedAt, keys.Credentials[i].RevokedBy = &now, p.Subject
		err := s.savePasskeys(ctx, keys, rev)
		if err == nil {
			s.log.Info("passkey revoked", "person", person, "credential_id", id, "by", p.Subject)
			return keys.Credentials[i], nil
		}
		if attempt >= 3 || !isConflict(err) {
			return contracts.Passkey{}, s.backendError("revoke the passkey", err)
		}
	}
}
