package email

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/notifier/internal/signedtoken"
)

// linkScheme is the scheme of link tokens: its HMAC context means a key can
// never be made to sign anything but a link token of this version, and its
// nonce context derives the nonce of a delivery (see nonceFor).
var linkScheme = signedtoken.Scheme{
	Context:      "countersign-email-link:v1.",
	NonceContext: "countersign-email-nonce:v1.",
	Errors:       signedtoken.NewErrors("email", "link token"),
}

// Errors of Verify. Each error Verify returns matches exactly one of them
// with errors.Is.
var (
	// ErrTokenMalformed: the text is not a link token of this version.
	ErrTokenMalformed = linkScheme.Errors.Malformed
	// ErrUnknownKey: the token names a key id that is not configured (a
	// retired key, or a token from another installation).
	ErrUnknownKey = linkScheme.Errors.UnknownKey
	// ErrBadSignature: the token was altered or not signed by us.
	ErrBadSignature = linkScheme.Errors.BadSignature
	// ErrTokenExpired: the token is genuine but its time is up.
	ErrTokenExpired = linkScheme.Errors.Expired
)

// MinSecretLen is the shortest accepted key secret, in bytes.
const MinSecretLen = signedtoken.MinSecretLen

// voteNamespace is the UUID namespace of the vote ids of email links.
var voteNamespace = uuid.MustParse("6c1b0f3e-52a4-4d39-9a8e-2f7d4c3b9e10")

// Key is one HMAC key for link tokens: an ID of 1 to 32 characters of
// [A-Za-z0-9_-], named inside every token, and a Secret of at least
// MinSecretLen random bytes. Keys are rotated by id: sign with a new key
// while the old one still verifies the links already sent. Formatting a
// Key shows its id only, never the secret.
type Key = signedtoken.Key

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
	if err := k.Validate(); err != nil {
		return Key{}, fmt.Errorf("email: link %w", err)
	}
	return k, nil
}

// Links signs and verifies the personal links of approval emails. It is
// safe for concurrent use.
type Links struct {
	signer *signedtoken.Signer
}

// NewLinks returns Links that sign with keys[0] and verify with any of keys.
// Key ids must be distinct.
func NewLinks(keys []Key) (*Links, error) {
	s, err := signedtoken.New(linkScheme, keys)
	if err != nil {
		return nil, fmt.Errorf("email: links: %w", err)
	}
	return &Links{signer: s}, nil
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

// Complete reports whether a link token names all it must.
func (w *wireClaims) Complete() bool { return w.EventID != "" && w.Approver != "" && w.Nonce != "" }

// Expiry is the link's expiry in Unix seconds.
func (w *wireClaims) Expiry() int64 { return w.Expires }

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
		n, err := signedtoken.RandomNonce()
		if err != nil {
			return "", fmt.Errorf("email: sign link: %w", err)
		}
		c.Nonce = n
	}
	token, err := l.signer.Sign(wireClaims{EventID: c.EventID, Approver: c.Approver, Expires: c.Expires.Unix(), Nonce: c.Nonce})
	if err != nil {
		return "", fmt.Errorf("email: sign link: %w", err)
	}
	return token, nil
}

// Verify checks token's signature and expiry at now and returns its claims.
// A genuine but expired token returns its claims with ErrTokenExpired, so a
// page can still say what the link was for. Any other error returns no
// claims. Errors never contain the token.
func (l *Links) Verify(token string, now time.Time) (Claims, error) {
	var w wireClaims
	err := l.signer.Verify(token, now, &w)
	if err != nil && !errors.Is(err, ErrTokenExpired) {
		return Claims{}, err
	}
	return Claims{EventID: w.EventID, Approver: w.Approver, Expires: time.Unix(w.Expires, 0).UTC(), Nonce: w.Nonce}, err
}

// nonceFor derives the nonce of the link in the delivery with idempotency
// key key: a redelivered email carries the same link, hence the same vote
// id, while the request, each reminder and each address get their own. It
// is keyed with the signing secret, so vote ids of links cannot be guessed.
func (l *Links) nonceFor(key string) string { return l.signer.Nonce(key) }

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
