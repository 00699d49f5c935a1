package receipt

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

var b64 = base64.RawURLEncoding

// JWK is one JSON Web Key (RFC 7517) of the kinds receipts use: an OKP key on
// Ed25519 (RFC 8037). D, the private part, is set only in a private key file.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	D   string `json:"d,omitempty"`
	Kid string `json:"kid,omitempty"`
	Alg string `json:"alg,omitempty"`
	Use string `json:"use,omitempty"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// KeySource finds the public key a receipt names by its kid. A KeySet holds
// pinned keys; a Fetcher fetches and caches a published JWKS.
type KeySource interface {
	// Key returns the key with id kid, or an error wrapping ErrUnknownKey.
	Key(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// KeySet is a set of public Ed25519 keys by key id.
type KeySet struct {
	ids  []string
	keys map[string]ed25519.PublicKey
}

// NewKeySet returns a set of the public parts of keys.
func NewKeySet(keys ...PrivateKey) *KeySet {
	s := &KeySet{keys: map[string]ed25519.PublicKey{}}
	for _, k := range keys {
		s.add(k.ID, k.Public())
	}
	return s
}

func (s *KeySet) add(kid string, pub ed25519.PublicKey) bool {
	if _, dup := s.keys[kid]; dup {
		return false
	}
	s.ids = append(s.ids, kid)
	s.keys[kid] = pub
	return true
}

// Key implements KeySource.
func (s *KeySet) Key(_ context.Context, kid string) (ed25519.PublicKey, error) {
	if s != nil {
		if k, ok := s.keys[kid]; ok {
			return k, nil
		}
	}
	return nil, wrap(ErrUnknownKey, "no key %q in the key set", kid)
}

// IDs are the key ids of the set, in order.
func (s *KeySet) IDs() []string { return slices.Clone(s.ids) }

// Len is the number of keys.
func (s *KeySet) Len() int { return len(s.ids) }

// Merge returns a set with the keys of s followed by those of o that s does
// not name.
func (s *KeySet) Merge(o *KeySet) *KeySet {
	m := &KeySet{keys: map[string]ed25519.PublicKey{}}
	for _, set := range []*KeySet{s, o} {
		if set == nil {
			continue
		}
		for _, id := range set.ids {
			m.add(id, set.keys[id])
		}
	}
	return m
}

// JWKS returns the public JWKS of the set, as served at
// /.well-known/jwks.json.
func (s *KeySet) JWKS() JWKS {
	out := JWKS{Keys: []JWK{}}
	for _, id := range s.ids {
		out.Keys = append(out.Keys, publicJWK(id, s.keys[id]))
	}
	return out
}

func publicJWK(kid string, pub ed25519.PublicKey) JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(pub), Kid: kid, Alg: Algorithm, Use: "sig"}
}

// ParseJWKS reads a public JWKS. Keys that are not Ed25519 signing keys
// (other key types, use "enc", another alg) are skipped, as a JWKS may
// publish keys for other purposes; an Ed25519 key without a kid, with a
// malformed x, or with a kid used twice is an error (ErrMalformed).
func ParseJWKS(data []byte) (*KeySet, error) {
	var set JWKS
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, malformedf("JWKS: %v", err)
	}
	if set.Keys == nil {
		return nil, malformedf("JWKS: no keys member")
	}
	s := &KeySet{keys: map[string]ed25519.PublicKey{}}
	for i, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || (k.Use != "" && k.Use != "sig") || (k.Alg != "" && k.Alg != Algorithm) {
			continue
		}
		pub, err := decodeKey(k.X, ed25519.PublicKeySize)
		if err != nil {
			return nil, malformedf("JWKS: keys[%d].x: %v", i, err)
		}
		if k.Kid == "" {
			return nil, malformedf("JWKS: keys[%d] has no kid", i)
		}
		if !s.add(k.Kid, pub) {
			return nil, malformedf("JWKS: kid %q appears twice", k.Kid)
		}
	}
	return s, nil
}

func decodeKey(s string, size int) ([]byte, error) {
	b, err := b64.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64url: %w", err)
	}
	if len(b) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}

// PrivateKey is a signing key with its id.
type PrivateKey struct {
	ID  string
	Key ed25519.PrivateKey
}

// Public is the key's public part.
func (k PrivateKey) Public() ed25519.PublicKey { return k.Key.Public().(ed25519.PublicKey) }

// GenerateKey makes a new signing key whose id is its RFC 7638 thumbprint.
func GenerateKey() (PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return PrivateKey{}, err
	}
	return PrivateKey{ID: Thumbprint(pub), Key: priv}, nil
}

// Thumbprint is the RFC 7638 JWK thumbprint (SHA-256, base64url) of an
// Ed25519 public key: the default key id.
func Thumbprint(pub ed25519.PublicKey) string {
	// The required members in lexicographic order, no whitespace (RFC 7638 §3).
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + b64.EncodeToString(pub) + `"}`))
	return b64.EncodeToString(sum[:])
}

// ParsePrivateJWKS reads a private key file: a JWKS whose keys carry d. The
// first key signs; the others are kept so their receipts still verify
// during a rotation. Every key must be a complete Ed25519 key with a kid
// (or none, for its thumbprint) and an x that matches d.
func ParsePrivateJWKS(data []byte) ([]PrivateKey, error) {
	var set JWKS
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("receipt keys: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("receipt keys: the key set is empty")
	}
	var out []PrivateKey
	seen := map[string]bool{}
	for i, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			return nil, fmt.Errorf("receipt keys: keys[%d]: kty must be OKP and crv Ed25519", i)
		}
		seed, err := decodeKey(k.D, ed25519.SeedSize)
		if err != nil {
			return nil, fmt.Errorf("receipt keys: keys[%d].d: %v", i, err)
		}
		pk := PrivateKey{Key: ed25519.NewKeyFromSeed(seed)}
		if k.X != "" {
			x, err := decodeKey(k.X, ed25519.PublicKeySize)
			if err != nil || subtle.ConstantTimeCompare(x, pk.Public()) != 1 {
				return nil, fmt.Errorf("receipt keys: keys[%d].x does not match its d", i)
			}
		}
		pk.ID = k.Kid
		if pk.ID == "" {
			pk.ID = Thumbprint(pk.Public())
		}
		if seen[pk.ID] {
			return nil, fmt.Errorf("receipt keys: kid %q appears twice", pk.ID)
		}
		seen[pk.ID] = true
		out = append(out, pk)
	}
	return out, nil
}

// MarshalPrivateJWKS writes keys as a private key file (see
// ParsePrivateJWKS). It holds secrets: store it with mode 0600.
func MarshalPrivateJWKS(keys []PrivateKey) ([]byte, error) {
	set := JWKS{Keys: []JWK{}}
	for _, k := range keys {
		j := publicJWK(k.ID, k.Public())
		j.D = b64.EncodeToString(k.Key.Seed())
		set.Keys = append(set.Keys, j)
	}
	return json.MarshalIndent(set, "", "  ")
}
