package push

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// This file is RFC 8292 VAPID: the server identifies itself to push
// services with an ES256 JWT over the endpoint's origin, and its public key,
// which browsers bind a subscription to (applicationServerKey).

// MaxVAPIDTTL is the longest a VAPID token may be valid (RFC 8292 §2).
const MaxVAPIDTTL = 24 * time.Hour

// VAPID is the server's application server key pair and its contact.
type VAPID struct {
	key *ecdsa.PrivateKey
	// Subject is the contact a push service may reach the operator at: a
	// mailto: or https: URI.
	Subject string
}

// GenerateVAPIDKey returns a new P-256 private key as Web Push tools write
// it: base64url of the 32-byte scalar.
func GenerateVAPIDKey() (string, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	b, err := k.Bytes()
	if err != nil {
		return "", err
	}
	return b64(b), nil
}

// NewVAPID reads a private key (base64url of the 32-byte P-256 scalar, as
// web-push generate-vapid-keys writes it) and checks the subject.
func NewVAPID(privateKey, subject string) (*VAPID, error) {
	raw, err := decodeB64(strings.TrimSpace(privateKey))
	if err != nil || len(raw) != 32 {
		return nil, errors.New("push: VAPID private key: want the base64url of a 32-byte P-256 scalar")
	}
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		return nil, fmt.Errorf("push: VAPID private key: %w", err)
	}
	if err := validSubject(subject); err != nil {
		return nil, err
	}
	return &VAPID{key: k, Subject: subject}, nil
}

func validSubject(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "mailto" && u.Scheme != "https") || (u.Scheme == "mailto" && u.Opaque == "") || (u.Scheme == "https" && u.Host == "") {
		return fmt.Errorf("push: VAPID subject %q: want mailto:address or an https URL", s)
	}
	return nil
}

// PublicKey is the uncompressed public key, base64url: what
// PushManager.subscribe takes as applicationServerKey, and the k of the
// Authorization header.
func (v *VAPID) PublicKey() string {
	b, _ := v.key.PublicKey.Bytes() // a valid P-256 key always encodes
	return b64(b)
}

// PrivateKey is the private key as NewVAPID reads it.
func (v *VAPID) PrivateKey() string {
	b, _ := v.key.Bytes()
	return b64(b)
}

// Authorization returns the Authorization header value for a request to
// endpoint, valid for ttl (at most MaxVAPIDTTL) from now:
//
//	vapid t=<ES256 JWT {aud: endpoint origin, exp, sub}>, k=<public key>
func (v *VAPID) Authorization(endpoint string, now time.Time, ttl time.Duration) (string, error) {
	aud, err := Origin(endpoint)
	if err != nil {
		return "", err
	}
	if ttl <= 0 || ttl > MaxVAPIDTTL {
		ttl = 12 * time.Hour
	}
	header := b64([]byte(`{"typ":"JWT","alg":"ES256"}`))
	claims, err := json.Marshal(struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}{aud, now.Add(ttl).Unix(), v.Subject})
	if err != nil {
		return "", err
	}
	signing := header + "." + b64(claims)
	h := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, v.key, h[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return "vapid t=" + signing + "." + b64(sig) + ", k=" + v.PublicKey(), nil
}

// Origin is the origin of a push endpoint (scheme://host[:port]), the aud
// of its VAPID token.
func Origin(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("push: endpoint %q is not an absolute URL", endpoint)
	}
	return u.Scheme + "://" + u.Host, nil
}

// VAPIDClaims are the claims of a verified VAPID token.
type VAPIDClaims struct {
	Aud string `json:"aud"`
	Exp int64  `json:"exp"`
	Sub string `json:"sub"`
}

// VerifyAuthorization checks an Authorization header as a push service
// does: the vapid scheme, an ES256 signature by the key k names, aud equal
// to origin, and exp in the future but at most 24 hours ahead of now. It
// returns the claims and the public key (base64url).
func VerifyAuthorization(header, origin string, now time.Time) (VAPIDClaims, string, error) {
	rest, ok := strings.CutPrefix(header, "vapid ")
	if !ok {
		return VAPIDClaims{}, "", errors.New("push: not a vapid authorization")
	}
	var token, k string
	for _, part := range strings.Split(rest, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch name {
		case "t":
			token = val
		case "k":
			k = val
		}
	}
	pubRaw, err := decodeB64(k)
	if err != nil {
		return VAPIDClaims{}, "", errors.New("push: vapid k is not base64url")
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), pubRaw)
	if err != nil {
		return VAPIDClaims{}, "", fmt.Errorf("push: vapid k: %w", err)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return VAPIDClaims{}, "", errors.New("push: vapid t is not a JWT")
	}
	var hdr struct{ Alg, Typ string }
	if raw, err := decodeB64(parts[0]); err != nil || json.Unmarshal(raw, &hdr) != nil || hdr.Alg != "ES256" {
		return VAPIDClaims{}, "", errors.New("push: vapid JWT header: want alg ES256")
	}
	sig, err := decodeB64(parts[2])
	if err != nil || len(sig) != 64 {
		return VAPIDClaims{}, "", errors.New("push: vapid JWT signature: want 64 bytes")
	}
	h := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, h[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return VAPIDClaims{}, "", errors.New("push: vapid JWT signature does not verify")
	}
	var c VAPIDClaims
	if raw, err := decodeB64(parts[1]); err != nil || json.Unmarshal(raw, &c) != nil {
		return VAPIDClaims{}, "", errors.New("push: vapid JWT claims are not JSON")
	}
	exp := time.Unix(c.Exp, 0)
	switch {
	case c.Aud != origin:
		return c, "", fmt.Errorf("push: vapid aud %q, want %q", c.Aud, origin)
	case !exp.After(now):
		return c, "", errors.New("push: vapid JWT expired")
	case exp.Sub(now) > MaxVAPIDTTL:
		return c, "", errors.New("push: vapid JWT valid for more than 24 hours")
	case validSubject(c.Sub) != nil:
		return c, "", errors.New("push: vapid sub is not a mailto: or https: URI")
	}
	return c, b64(pubRaw), nil
}
