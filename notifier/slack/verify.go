package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of a signed request from Slack.
const (
	HeaderSignature = "X-Slack-Signature"
	HeaderTimestamp = "X-Slack-Request-Timestamp"
)

// MaxClockSkew is how far a request's timestamp may be from the clock, in
// either direction, before the request is refused as a possible replay.
const MaxClockSkew = 5 * time.Minute

// Errors of Verify. A caller answers all of them with 401.
var (
	// ErrNoSecret: no signing secret is configured, so nothing can be verified.
	ErrNoSecret = errors.New("slack: no signing secret configured")
	// ErrMissingHeaders: the signature or timestamp header is absent.
	ErrMissingHeaders = errors.New("slack: missing signature headers")
	// ErrStaleTimestamp: the timestamp is more than MaxClockSkew from now.
	ErrStaleTimestamp = errors.New("slack: request timestamp outside the allowed window")
	// ErrBadSignature: the signature is malformed or does not match.
	ErrBadSignature = errors.New("slack: bad request signature")
)

const signatureVersion = "v0"

// Verify checks that body was signed by Slack with secret: the
// X-Slack-Signature header must be "v0=" and the hex HMAC-SHA256, keyed with
// secret's bytes, of "v0:<timestamp>:<body>", and X-Slack-Request-Timestamp
// (Unix seconds) must be within MaxClockSkew of now. body is the raw request
// body, before any parsing.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	if secret == "" {
		return ErrNoSecret
	}
	sigHeader, tsHeader := h.Get(HeaderSignature), h.Get(HeaderTimestamp)
	if sigHeader == "" || tsHeader == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: the timestamp is not a number of seconds", ErrBadSignature)
	}
	skew := now.Sub(time.Unix(ts, 0))
	if skew > MaxClockSkew || skew < -MaxClockSkew {
		return ErrStaleTimestamp
	}
	hexSig, ok := strings.CutPrefix(sigHeader, signatureVersion+"=")
	if !ok {
		return fmt.Errorf("%w: unsupported signature version", ErrBadSignature)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: the signature is not %d hex bytes", ErrBadSignature, sha256.Size)
	}
	if !hmac.Equal(got, signature(secret, tsHeader, body)) {
		return ErrBadSignature
	}
	return nil
}

// signature is the raw HMAC of Slack's base string for ts and body.
func signature(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(signatureVersion + ":" + ts + ":"))
	m.Write(body)
	return m.Sum(nil)
}
