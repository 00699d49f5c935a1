package email

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
)

// Errors of Verify. Each error Verify returns matches exactly one of them
// with errors.Is.
var (
	// ErrTokenMalformed: the text is not a link token of this version.
	ErrTokenMalformed = errors.New("email: malformed link token")
	// ErrUnknownKey: the token names a key id that is not configured (a
	// retired key, or a token from another installation).
	ErrUnknownKey = errors.New("email: link token signed with an unknown key")
	// ErrBadSignature: the token was altered or not signed by us.
	ErrBadSignature = errors.New("email: link token signature does not match")
	// ErrTokenExpired: the token is genuine but its time is up.
	ErrTokenExpired = errors.New("email: link token expired")
)

// MinSecretLen is the shortest accepted key secret, in bytes.
const MinSecretLen = 32

// maxKeyIDLen bounds a key id, which appears in every link.
const maxKeyIDLen = 32

// maxTokenLen bounds the tokens Verify looks at; real ones are a few
// hundred characters.
const maxTokenLen = 2048

// tokenVersion is the first field of every token.
const tokenVersion = "v1"

// macContext is prefixed to what a token's HMAC covers, so that a key can
// never be made to sign anything but a link token of this version.
const macContext = "countersign-email-link:v1."

// nonceContext is prefixed to what the deterministic nonce of a delivery is
// derived from (see nonceFor).
const nonceContext = "countersign-email-nonce:v1."

// voteNamespace is the UUID namespace of the vote ids of email links.
var voteNamespace = uuid.MustParse("6c1b0f3e-52a4-4d39-9a8e-2f7d4c3b9e10")

// Key is one HMAC key for link tokens. ID names it inside every token, so
// keys can be rotated: sign with a new key while the old one still verifies
// the links already sent.
type Key struct {
	// ID is 1 to 32 characters of [A-Za-z0-9_-].
	ID string
	// Secret is at least MinSecretLen random bytes.
	Secret []byte
}

// String shows the key id only, never the secret.
func (k Key) String() string { return "email.Key{ID: " + k.ID + ", Secret: <redacted>}" }

// GoString is String, so that %#v does not print the secret either.
func (k Key) GoString() string { return k.String() }

func (k Key) validate() error {
	if !validKeyID(k.ID) {
		return fmt.Errorf("key id %q: want 1 to %d characters of A-Z a-z 0-9 _ -", k.ID, maxKeyIDLen)
	}
	if len(k.Secret) < MinSecretLen {
		return fmt.Errorf("key %q: secret has %d bytes, want at least %d", k.ID, len(k.Secret), MinSecretLen)
	}
	return nil
}

func validKeyID(id string) bool {
	// The characters of an event id, shorter.
	return len(id) <= maxKeyIDLen && contracts.ValidEventID(id)
}

// ParseKey reads a key from configuration text "<id>:<secret>", where the
// secret is base64 (standard or URL alphabet, padded or not) of at least
// MinSecretLen bytes, e.g. "2026-07:" followed by the output of
// `openssl rand -base64 32`. Errors never contain the secret.
func ParseKey(s string) (Key, error) {
	id, secret, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Key{}, errors.New("email: link key: want <id>:<base64 secret>")
	}
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err = enc.DecodeString(secret); err == nil {
			break
		}
	}
	if err != nil {
		return Key{}, fmt.Errorf("email: link key %q: the secret is not base64", id)
	}
	k := Key{ID: id, Secret: raw}
	if err := k.validate(); err != nil {
		return Key{}, fmt.Errorf("email: link %w", err)
	}
	return k, nil
}

// Links signs and verifies the personal links of approval emails. It is
// safe for concurrent use.
type Links struct {
	signer Key
	keys   map[string][]byte
}

// NewLinks returns Links that sign with keys[0] and verify with any of keys.
// Key ids must be distinct.
func NewLinks(keys []Key) (*Links, error) {
	if len(keys) == 0 {
		return nil, errors.New("email: links: at least one key is required")
	}
	l := &Links{keys: make(map[string][]byte, len(keys))}
	var errs []error
	for _, k := range keys {
		if err := k.validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := l.keys[k.ID]; dup {
			errs = append(errs, fmt.Errorf("key id %q is used twice", k.ID))
			continue
		}
		l.keys[k.ID] = append([]byte(nil), k.Secret...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("email: links: %w", err)
	}
	l.signer = Key{ID: keys[0].ID, Secret: l.keys[keys[0].ID]}
	return l, nil
}

// Claims is what a link token says: approver may answer approval EventID
// until Expires. Nonce makes each link distinct; VoteID derives the link's
// vote id from it.
type Claims struct {
	EventID  string
	Approver string
	// Expires has second precision in a token.
	Expires time.Time
	Nonce   string
}

// wireClaims is the JSON inside a token, with short names to keep links short.
type wireClaims struct {
	EventID  string `json:"evt"`
	Approver string `json:"sub"`
	Expires  int64  `json:"exp"`
	Nonce    string `json:"jti"`
}

// Sign returns the token for c:
//
//	v1.<kid>.<base64url(JSON claims)>.<base64url(HMAC-SHA256(key, "countersign-email-link:v1." + kid + "." + payload))>
//
// where payload is the third field as it appears in the token, and base64url
// is unpadded. A token contains only URL-safe characters. An empty Nonce is
// filled with 16 random bytes.
func (l *Links) Sign(c Claims) (string, error) {
	if c.EventID == "" || c.Approver == "" || c.Expires.IsZero() {
		return "", errors.New("email: sign link: event id, approver and expiry are required")
	}
	if c.Nonce == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("email: sign link: %w", err)
		}
		c.Nonce = base64.RawURLEncoding.EncodeToString(b[:])
	}
	data, err := json.Marshal(wireClaims{EventID: c.EventID, Approver: c.Approver, Expires: c.Expires.Unix(), Nonce: c.Nonce})
	if err != nil {
		return "", fmt.Errorf("email: sign link: %w", err)
	}
	payload := base64.RawURLEncoding.EncodeToString(data)
	sig := mac(l.signer.Secret, l.signer.ID, payload)
	return tokenVersion + "." + l.signer.ID + "." + payload + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// Verify checks token's signature and expiry at now and returns its claims.
// A genuine but expired token returns its claims with ErrTokenExpired, so a
// page can still say what the link was for. Any other error returns no
// claims. Errors never contain the token.
func (l *Links) Verify(token string, now time.Time) (Claims, error) {
	if len(token) > maxTokenLen {
		return Claims{}, ErrTokenMalformed
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != tokenVersion || parts[2] == "" {
		return Claims{}, ErrTokenMalformed
	}
	kid, payload := parts[1], parts[2]
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(sig) != sha256.Size {
		return Claims{}, ErrTokenMalformed
	}
	secret, ok := l.keys[kid]
	if !ok {
		return Claims{}, ErrUnknownKey
	}
	if !hmac.Equal(sig, mac(secret, kid, payload)) {
		return Claims{}, ErrBadSignature
	}
	data, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return Claims{}, ErrTokenMalformed
	}
	var w wireClaims
	if err := contracts.Decode(data, &w); err != nil || w.EventID == "" || w.Approver == "" || w.Nonce == "" || w.Expires == 0 {
		return Claims{}, ErrTokenMalformed
	}
	c := Claims{EventID: w.EventID, Approver: w.Approver, Expires: time.Unix(w.Expires, 0).UTC(), Nonce: w.Nonce}
	if !now.Before(c.Expires) {
		return c, ErrTokenExpired
	}
	return c, nil
}

// nonceFor derives the nonce of the link in the delivery with idempotency
// key key: a redelivered email carries the same link, hence the same vote
// id, while the request, each reminder and each address get their own. It
// is keyed with the signing secret, so vote ids of links cannot be guessed.
func (l *Links) nonceFor(key string) string {
	h := hmac.New(sha256.New, l.signer.Secret)
	h.Write([]byte(nonceContext + key))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

func mac(secret []byte, kid, payload string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(macContext + kid + "." + payload))
	return h.Sum(nil)
}

// VoteID is the id of the first vote cast with the link of c: a UUID
// (version 5) derived from the link's nonce under a namespace of
// Countersign's email links. The arbiter counts a vote id once, so posting
// the same answer twice counts it once.
func VoteID(c Claims) string {
	return AttemptVoteID(c, 0)
}

// AttemptVoteID is the id of the vote cast with the link of c after n of
// its earlier votes were refused: a refused vote does not use up a link, so
// the next answer through it needs a new id. AttemptVoteID(c, 0) is
// VoteID(c).
func AttemptVoteID(c Claims, n int) string {
	if n == 0 {
		return uuid.NewSHA1(voteNamespace, []byte(c.Nonce)).String()
	}
	return uuid.NewSHA1(voteNamespace, []byte(c.Nonce+"\n"+strconv.Itoa(n))).String()
}
