package signedtoken_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/internal/signedtoken"
)

type claims struct {
	Sub string `json:"sub"`
	Exp int64  `json:"exp"`
}

func (c *claims) Complete() bool { return c.Sub != "" }
func (c *claims) Expiry() int64  { return c.Exp }

func scheme(name string) signedtoken.Scheme {
	return signedtoken.Scheme{Context: "test-" + name + ":v1.", NonceContext: "test-" + name + "-nonce:v1.", Errors: signedtoken.NewErrors("test", name+" token")}
}

var key = signedtoken.Key{ID: "k1", Secret: bytes.Repeat([]byte{3}, signedtoken.MinSecretLen)}

// A token of one scheme never verifies in another under the same key, and
// each error is worded by its scheme and matches exactly one kind.
func TestSchemesAreSeparate(t *testing.T) {
	a, err := signedtoken.New(scheme("a"), []signedtoken.Key{key})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := signedtoken.New(scheme("b"), []signedtoken.Key{key})
	now := time.Unix(1_800_000_000, 0)
	tok, err := a.Sign(claims{Sub: "alice", Exp: now.Unix() + 60})
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	if err := a.Verify(tok, now, &c); err != nil || c.Sub != "alice" {
		t.Fatalf("Verify = %+v, %v", c, err)
	}
	err = b.Verify(tok, now, &claims{})
	if err == nil || err.Error() != "test: b token signature does not match" {
		t.Fatalf("another scheme's token: %v", err)
	}
	kinds := []error{signedtoken.ErrMalformed, signedtoken.ErrUnknownKey, signedtoken.ErrBadSignature, signedtoken.ErrExpired}
	for _, k := range kinds {
		if errors.Is(err, k) != (k == signedtoken.ErrBadSignature) {
			t.Errorf("errors.Is(%v, %v) = %v", err, k, !(k == signedtoken.ErrBadSignature))
		}
	}
	if a.Nonce("x") == b.Nonce("x") || a.Nonce("x") != a.Nonce("x") {
		t.Error("nonces are not deterministic per scheme")
	}
}

func TestNewNamesEveryBadKey(t *testing.T) {
	_, err := signedtoken.New(scheme("a"), []signedtoken.Key{{ID: "k.1", Secret: key.Secret}, {ID: "k2", Secret: []byte("short")}})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(`"k.1"`)) || !bytes.Contains([]byte(err.Error()), []byte(`"k2"`)) {
		t.Errorf("New = %v, want both bad keys named", err)
	}
}
