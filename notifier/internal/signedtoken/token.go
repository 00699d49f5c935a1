package signedtoken

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
)

// version is the first field of every token.
const version = "v1"

// maxTokenLen bounds the tokens Verify looks at; real ones are a few
// hundred characters.
const maxTokenLen = 2048

// Scheme is one kind of token.
type Scheme struct {
	// Context is prefixed to what a token's HMAC covers, e.g.
	// "countersign-email-link:v1.".
	Context string
	// NonceContext is prefixed to what Nonce derives a nonce from.
	NonceContext string
	// Errors are what Verify returns.
	Errors Errors
}

// Claims is the JSON payload of a token, as its scheme defines it.
type Claims interface {
	// Complete reports whether every field the scheme requires is set.
	Complete() bool
	// Expiry is when the token stops verifying, in Unix seconds.
	Expiry() int64
}

// Signer signs tokens of one scheme with its first key and verifies them
// with any of its keys. It is safe for concurrent use.
type Signer struct {
	scheme Scheme
	signer Key
	keys   map[string][]byte
}

// New returns a Signer of scheme that signs with keys[0]. Key ids must be
// distinct; the error names every bad key.
func New(scheme Scheme, keys []Key) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("at least one key is required")
	}
	s := &Signer{scheme: scheme, keys: make(map[string][]byte, len(keys))}
	var errs []error
	for _, k := range keys {
		if err := k.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := s.keys[k.ID]; dup {
			errs = append(errs, fmt.Errorf("key id %q is used twice", k.ID))
			continue
		}
		s.keys[k.ID] = slices.Clone(k.Secret)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.signer = Key{ID: keys[0].ID, Secret: s.keys[keys[0].ID]}
	return s, nil
}

// Sign returns the token of claims, marshalled as JSON. The scheme checks
// its claims before.
func (s *Signer) Sign(claims any) (string, error) {
	data, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	payload := b64(data)
	return version + "." + s.signer.ID + "." + payload + "." + b64(s.mac(s.signer.Secret, s.signer.ID, payload)), nil
}

// Verify checks token's form, key and signature, decodes its payload into
// claims (a pointer), and checks claims are complete and unexpired at now.
// A genuine but expired token fills claims and returns the scheme's
// Expired error; any other error may leave claims partly filled.
func (s *Signer) Verify(token string, now time.Time, claims Claims) error {
	errs := s.scheme.Errors
	if len(token) > maxTokenLen {
		return errs.Malformed
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != version || parts[2] == "" {
		return errs.Malformed
	}
	kid, payload := parts[1], parts[2]
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(sig) != sha256.Size {
		return errs.Malformed
	}
	secret, ok := s.keys[kid]
	if !ok {
		return errs.UnknownKey
	}
	if !hmac.Equal(sig, s.mac(secret, kid, payload)) {
		return errs.BadSignature
	}
	data, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || contracts.Decode(data, claims) != nil || !claims.Complete() || claims.Expiry() == 0 {
		return errs.Malformed
	}
	if !now.Before(time.Unix(claims.Expiry(), 0)) {
		return errs.Expired
	}
	return nil
}

// Nonce derives a deterministic nonce from input (a delivery's
// idempotency key, and whatever else tells its tokens apart): 16 bytes of
// HMAC-SHA256 under the signing secret of the scheme's NonceContext +
// input, in base64url.
func (s *Signer) Nonce(input string) string {
	h := hmac.New(sha256.New, s.signer.Secret)
	h.Write([]byte(s.scheme.NonceContext + input))
	return b64(h.Sum(nil)[:16])
}

// RandomNonce is 16 random bytes in base64url, for a token that needs no
// deterministic nonce.
func RandomNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return b64(b[:]), nil
}

func (s *Signer) mac(secret []byte, kid, payload string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(s.scheme.Context + kid + "." + payload))
	return h.Sum(nil)
}

// b64 is unpadded base64url.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
