package receipt_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts/receipt"
)

func readFixtures(t *testing.T) Fixtures {
	t.Helper()
	data, err := os.ReadFile(fixturesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f Fixtures
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRFC8037 checks the key handling and signature of RFC 8037
// Appendix A: the private key file format reads A.1, its id is the A.3
// thumbprint, and signing A.4's input gives A.4's JWS.
func TestRFC8037(t *testing.T) {
	f := readFixtures(t)
	k := rfcKey(t)
	if k.ID != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" || f.RFC8037.Thumbprint != k.ID {
		t.Fatalf("thumbprint %s, want RFC 8037 A.3's", k.ID)
	}
	parts := strings.Split(f.RFC8037.Compact, ".")
	sig := ed25519.Sign(k.Key, []byte(parts[0]+"."+parts[1]))
	if got := parts[0] + "." + parts[1] + "." + base64URL(sig); got != f.RFC8037.Compact {
		t.Fatalf("signed A.4 as %s", got)
	}
	// A.4's JWS is a valid signature but no receipt: it has no typ.
	_, err := receipt.Verify(context.Background(), f.RFC8037.Compact, "t", nil, receipt.Options{Keys: receipt.NewKeySet(k)})
	if !errors.Is(err, receipt.ErrMalformed) {
		t.Fatalf("Verify(A.4) = %v, want ErrMalformed", err)
	}
	// The public JWK of A.2 reads as a key set member once it has a kid.
	set, err := receipt.ParseJWKS([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + f.RFC8037.PublicJWK.X + `","kid":"a2"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := set.Key(context.Background(), "a2")
	if err != nil || !pub.Equal(k.Public()) {
		t.Fatalf("A.2 key %x, %v", pub, err)
	}
}

// TestRFC8032 checks crypto/ed25519 against the RFC 8032 vectors the other
// verifiers also read.
func TestRFC8032(t *testing.T) {
	for _, v := range readFixtures(t).RFC8032 {
		seed, _ := hex.DecodeString(v.Secret)
		msg, _ := hex.DecodeString(v.Message)
		k := ed25519.NewKeyFromSeed(seed)
		if got := hex.EncodeToString(k.Public().(ed25519.PublicKey)); got != v.Public {
			t.Errorf("public %s, want %s", got, v.Public)
		}
		if got := hex.EncodeToString(ed25519.Sign(k, msg)); got != v.Signature {
			t.Errorf("signature %s, want %s", got, v.Signature)
		}
	}
}

func TestParseJWKSRefusesBrokenKeys(t *testing.T) {
	for name, jwks := range map[string]string{
		"no keys":       `{}`,
		"short x":       `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"a"}]}`,
		"no kid":        `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		"duplicate kid": `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"a"},{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"a"}]}`,
		"padded x":      `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo=","kid":"a"}]}`,
	} {
		if _, err := receipt.ParseJWKS([]byte(jwks)); !errors.Is(err, receipt.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// Keys for other purposes are skipped, not errors.
	set, err := receipt.ParseJWKS([]byte(`{"keys":[{"kty":"RSA","n":"x","e":"AQAB","kid":"r"},{"kty":"OKP","crv":"X25519","x":"abc","kid":"x"}]}`))
	if err != nil || set.Len() != 0 {
		t.Fatalf("%v, %d keys", err, set.Len())
	}
	if _, err := receipt.ParsePrivateJWKS([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A","x":"` + base64URL(make([]byte, 32)) + `"}]}`)); err == nil {
		t.Fatal("a private key whose x does not match d was read")
	}
}
