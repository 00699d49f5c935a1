package signedtoken

import (
	"fmt"

	"github.com/countersign/countersign/contracts"
)

// MinSecretLen is the shortest accepted key secret, in bytes.
const MinSecretLen = 32

// maxKeyIDLen bounds a key id, which appears in every token.
const maxKeyIDLen = 32

// Key is one HMAC key. ID names it inside every token, so keys can be
// rotated: sign with a new key while the old one still verifies the tokens
// already sent.
type Key struct {
	// ID is 1 to 32 characters of [A-Za-z0-9_-].
	ID string
	// Secret is at least MinSecretLen random bytes.
	Secret []byte
}

// String shows the key id only, never the secret.
func (k Key) String() string { return "Key{ID: " + k.ID + ", Secret: <redacted>}" }

// GoString is String, so that %#v does not print the secret either.
func (k Key) GoString() string { return k.String() }

// Validate checks the id and the length of the secret. Its errors name the
// key id, never the secret.
func (k Key) Validate() error {
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
