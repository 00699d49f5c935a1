package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// SpecPolicyDocument names an applied policy as stored in hitl_policy: under
// PolicyKey (the live one) and under its version's key.
const SpecPolicyDocument = "countersign.policy/v1"

// PolicyKey is the key of the live policy in the hitl_policy bucket.
const PolicyKey = "current"

// PolicyVersionsPrefix opens the key of every applied policy version in
// hitl_policy (see PolicyVersionKey). A version's key is written once and
// never changed, so every version that ever gated a request stays readable.
const PolicyVersionsPrefix = "versions."

// PolicyVersionKey is the hitl_policy key of a policy version: the version
// itself when it is a plain name (letters, digits, '-', '_' and inner dots,
// at most 128 bytes), else "=" and the hex SHA-256 of the version. The two
// forms cannot collide: a plain name has no '='.
func PolicyVersionKey(version string) string {
	if plainVersion(version) {
		return PolicyVersionsPrefix + version
	}
	sum := sha256.Sum256([]byte(version))
	return PolicyVersionsPrefix + "=" + hex.EncodeToString(sum[:])
}

func plainVersion(v string) bool {
	if v == "" || len(v) > 128 || v[0] == '.' || v[len(v)-1] == '.' || strings.Contains(v, "..") {
		return false
	}
	for _, c := range []byte(v) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
