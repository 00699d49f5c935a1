package push

import (
	"encoding/base64"
	"strings"
)

// decodeB64 reads base64url as browsers write it, padded or not (and the
// standard alphabet, which some clients send).
func decodeB64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "+/") {
		return base64.RawStdEncoding.DecodeString(s)
	}
	return base64.RawURLEncoding.DecodeString(s)
}

// b64 is base64url without padding, as Web Push writes keys.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
