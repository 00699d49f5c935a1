package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks headers. Header names are case-insensitive; these are
// the spellings of the specification.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts the serialized form of a signing secret.
const SecretPrefix = "whsec_"

// Bounds of a signing key's length in bytes, from the specification.
const (
	MinKeyLen = 24
	MaxKeyLen = 64
)

// DefaultTolerance is how far a webhook-timestamp may be from the receiver's
// clock, in either direction, when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// ErrInvalidSecret is returned by ParseSecret. Its messages never contain
// the secret.
var ErrInvalidSecret = errors.New("webhook: invalid signing secret")

// Errors of Verify. They are stable; compare with errors.Is.
var (
	ErrMissingHeaders      = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature header")
	ErrBadTimestamp        = errors.New("webhook: webhook-timestamp is not a unix time in seconds")
	ErrTooOld              = errors.New("webhook: webhook-timestamp is too old")
	ErrTooNew              = errors.New("webhook: webhook-timestamp is too far in the future")
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
)

// ParseSecret decodes a signing secret: "whsec_" followed by standard base64
// (the prefix may be left out; surrounding white space is ignored). The
// decoded key must be MinKeyLen to MaxKeyLen bytes long. Errors wrap
// ErrInvalidSecret and never contain the secret.
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), SecretPrefix)
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidSecret)
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		// The decoder's error holds only an offset, but say nothing of the
		// input at all.
		return nil, fmt.Errorf("%w: not %s followed by standard base64", ErrInvalidSecret, SecretPrefix)
	}
	if len(key) < MinKeyLen || len(key) > MaxKeyLen {
		return nil, fmt.Errorf("%w: decodes to %d bytes, want %d to %d", ErrInvalidSecret, len(key), MinKeyLen, MaxKeyLen)
	}
	return key, nil
}

// Sign returns the v1 signature of body sent as message msgID at ts:
// "v1," followed by the base64 HMAC-SHA256 under key of
// "<msgID>.<unix seconds of ts>.<body>". body must be the exact bytes sent.
func Sign(key []byte, msgID string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, msgID, ts.Unix(), body))
}

func mac(key []byte, msgID string, unix int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msgID))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, unix, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a received webhook: the headers h (webhook-id,
// webhook-timestamp, webhook-signature) and the raw request body, as read,
// before any JSON decoding. It is what a receiver of Countersign's webhooks
// calls; keys are the decoded secrets (see ParseSecret) that may have
// signed, so a receiver can accept the old and the new secret during a
// rotation.
//
// The timestamp must be within tolerance of now in either direction
// (DefaultTolerance when tolerance is not positive). webhook-signature is a
// space-separated list; Verify passes when any "v1," entry matches any key,
// compared in constant time, and ignores entries of other versions. Empty
// keys are ignored. The errors wrap ErrMissingHeaders, ErrBadTimestamp,
// ErrTooOld, ErrTooNew or ErrNoMatchingSignature.
//
// Verify does not remember webhook-ids: a receiver drops a webhook-id it has
// already processed (for at least the tolerance), because a webhook can be
// delivered more than once.
func Verify(keys [][]byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts := h.Get(HeaderID), h.Get(HeaderTimestamp)
	sigs := strings.Fields(strings.Join(h.Values(HeaderSignature), " "))
	if id == "" || ts == "" || len(sigs) == 0 {
		return ErrMissingHeaders
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return ErrBadTimestamp
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sent := time.Unix(unix, 0)
	if now.Sub(sent) > tolerance {
		return ErrTooOld
	}
	if sent.Sub(now) > tolerance {
		return ErrTooNew
	}

	want := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if len(k) > 0 {
			want = append(want, mac(k, id, unix, body))
		}
	}
	for _, s := range sigs {
		version, b64, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(got) != sha256.Size {
			continue
		}
		for _, w := range want {
			if hmac.Equal(got, w) {
				return nil
			}
		}
	}
	return ErrNoMatchingSignature
}

// parseUnix parses a webhook-timestamp: decimal digits only, no sign, so the
// value signed is the value in the header.
func parseUnix(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
