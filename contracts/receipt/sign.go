package receipt

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
)

// DefaultTTL is how long a receipt is valid when no TTL is configured:
// long enough to reach the tool, short enough that a receipt is not a
// standing right.
const DefaultTTL = 5 * time.Minute

// MaxTTL bounds a configured TTL.
const MaxTTL = time.Hour

// SignerConfig configures a Signer.
type SignerConfig struct {
	// Key signs; its ID goes into the kid header.
	Key PrivateKey
	// Issuer is the iss claim (default DefaultIssuer).
	Issuer string
	// TTL is the time from issue to expiry (default DefaultTTL, at most MaxTTL).
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Signer issues receipts. Only the arbiter (and the API, for policy
// receipts) holds one.
type Signer struct {
	cfg SignerConfig
	hdr string
}

// NewSigner checks cfg and returns a Signer.
func NewSigner(cfg SignerConfig) (*Signer, error) {
	if cfg.Issuer == "" {
		cfg.Issuer = DefaultIssuer
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var errs []error
	if len(cfg.Key.Key) != ed25519.PrivateKeySize || cfg.Key.ID == "" {
		errs = append(errs, errors.New("receipt: SignerConfig.Key must be an Ed25519 key with an id"))
	}
	if !plainText(cfg.Key.ID, contracts.MaxReceiptKeyIDBytes) || !plainText(cfg.Issuer, contracts.MaxReceiptIssuerBytes) {
		errs = append(errs, fmt.Errorf("receipt: SignerConfig: a key id (at most %d bytes) and an issuer (at most %d) must be printable ASCII without \" \\ < > &",
			contracts.MaxReceiptKeyIDBytes, contracts.MaxReceiptIssuerBytes))
	}
	if cfg.TTL < time.Second || cfg.TTL > MaxTTL {
		errs = append(errs, errors.New("receipt: SignerConfig.TTL must be between 1s and 1h"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h, err := json.Marshal(header{Alg: Algorithm, Typ: Type, Kid: cfg.Key.ID})
	if err != nil {
		return nil, err
	}
	return &Signer{cfg: cfg, hdr: b64.EncodeToString(h)}, nil
}

// KeyID is the id of the signing key.
func (s *Signer) KeyID() string { return s.cfg.Key.ID }

// Keys is the public key of s, as a key set to serve or verify with.
func (s *Signer) Keys() *KeySet { return NewKeySet(s.cfg.Key) }

// Issuer is the iss of the receipts s signs.
func (s *Signer) Issuer() string { return s.cfg.Issuer }

// Sign fills iss, iat, exp and jti (when empty) and returns the compact
// JWS. A receipt never lives longer than the signer's TTL: an exp that is
// set (the end of a standing grant, say) is kept only when it comes first.
func (s *Signer) Sign(c Claims) (string, error) {
	now := s.cfg.Now()
	if c.Issuer == "" {
		c.Issuer = s.cfg.Issuer
	}
	if c.IssuedAt == 0 {
		c.IssuedAt = now.Unix()
	}
	if limit := now.Add(s.cfg.TTL).Unix(); c.ExpiresAt == 0 || c.ExpiresAt > limit {
		c.ExpiresAt = limit
	}
	if c.ID == "" {
		var id [16]byte
		if _, err := rand.Read(id[:]); err != nil {
			return "", err
		}
		c.ID = b64.EncodeToString(id[:])
	}
	if err := c.validate(); err != nil {
		return "", err
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	input := s.hdr + "." + b64.EncodeToString(payload)
	return input + "." + b64.EncodeToString(ed25519.Sign(s.cfg.Key.Key, []byte(input))), nil
}

// header is the protected header of a receipt.
type header struct {
	Alg  string   `json:"alg"`
	Typ  string   `json:"typ,omitempty"`
	Kid  string   `json:"kid,omitempty"`
	Crit []string `json:"crit,omitempty"`
}

// plainText reports whether s is 1 to n characters of printable ASCII that
// JSON encodes as they are.
func plainText(s string, n int) bool {
	if s == "" || len(s) > n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
