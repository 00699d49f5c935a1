package push_test

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/countersign/countersign/notifier/push"
)

// The example of RFC 8291 Appendix A.
const (
	rfcPlaintext = "When I grow up, I want to be a watermelon"
	rfcASPublic  = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
	rfcASPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
	rfcUAPublic  = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
	rfcUAPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
	rfcSalt      = "DGv6ra1nlYgDCS1FRnbzlw"
	rfcAuth      = "BTBZMqHH6r4Tts7J_aSIgg"
	rfcBody      = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
)

func unb64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rfcKeys(t *testing.T) (as, ua *ecdh.PrivateKey) {
	t.Helper()
	as, err := ecdh.P256().NewPrivateKey(unb64(t, rfcASPrivate))
	if err != nil {
		t.Fatal(err)
	}
	ua, err = ecdh.P256().NewPrivateKey(unb64(t, rfcUAPrivate))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(as.PublicKey().Bytes(), unb64(t, rfcASPublic)) || !bytes.Equal(ua.PublicKey().Bytes(), unb64(t, rfcUAPublic)) {
		t.Fatal("the RFC's private keys do not give its public keys")
	}
	return as, ua
}

func TestRFC8291AppendixAEncrypts(t *testing.T) {
	as, ua := rfcKeys(t)
	sub := push.Subscription{Endpoint: "https://push.example.net/push/JzLQ3raZJfFBR0aqvOMsLrt54w4rJUsV", P256DH: ua.PublicKey(), Auth: unb64(t, rfcAuth)}
	body, err := push.EncryptWith([]byte(rfcPlaintext), sub, as, unb64(t, rfcSalt))
	if err != nil {
		t.Fatal(err)
	}
	if got := base64.RawURLEncoding.EncodeToString(body); got != rfcBody {
		t.Fatalf("body:\n got %s\nwant %s", got, rfcBody)
	}
}

func TestRFC8291AppendixADecrypts(t *testing.T) {
	_, ua := rfcKeys(t)
	got, err := push.Decrypt(unb64(t, rfcBody), ua, unb64(t, rfcAuth))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != rfcPlaintext {
		t.Fatalf("plaintext %q, want %q", got, rfcPlaintext)
	}
}

func TestEncryptRoundTripsAndRefusesOtherKeys(t *testing.T) {
	ua, _ := ecdh.P256().GenerateKey(nil)
	auth := bytes.Repeat([]byte{7}, 16)
	msg := bytes.Repeat([]byte("x"), push.MaxPayload)
	body, err := push.Encrypt(msg, push.Subscription{P256DH: ua.PublicKey(), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > push.RecordSize {
		t.Fatalf("body of %d bytes is over one record", len(body))
	}
	got, err := push.Decrypt(body, ua, auth)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("round trip: %v", err)
	}
	other, _ := ecdh.P256().GenerateKey(nil)
	if _, err := push.Decrypt(body, other, auth); !errors.Is(err, push.ErrDecrypt) {
		t.Fatalf("another key: %v, want ErrDecrypt", err)
	}
	if _, err := push.Decrypt(body, ua, bytes.Repeat([]byte{8}, 16)); !errors.Is(err, push.ErrDecrypt) {
		t.Fatalf("another auth secret: %v, want ErrDecrypt", err)
	}
	if _, err := push.Decrypt(body[:40], ua, auth); !errors.Is(err, push.ErrMalformed) {
		t.Fatalf("cut body: %v, want ErrMalformed", err)
	}
	if _, err := push.Encrypt(append(msg, 'y'), push.Subscription{P256DH: ua.PublicKey(), Auth: auth}); err == nil {
		t.Fatal("a payload over MaxPayload was encrypted")
	}
}

func TestParseKeys(t *testing.T) {
	if _, _, err := push.ParseKeys(rfcUAPublic, rfcAuth); err != nil {
		t.Fatal(err)
	}
	if _, _, err := push.ParseKeys(rfcUAPublic+"==", rfcAuth+"=="); err != nil {
		t.Fatalf("padded: %v", err)
	}
	bad := [][2]string{
		{"", rfcAuth},
		{rfcUAPublic[:40], rfcAuth},
		{"B" + rfcUAPublic[2:] + "A", rfcAuth}, // not on the curve
		{rfcUAPublic, "AAAA"},
		{rfcUAPublic, "!!"},
	}
	for _, b := range bad {
		if _, _, err := push.ParseKeys(b[0], b[1]); err == nil {
			t.Errorf("ParseKeys(%q, %q) accepted", b[0], b[1])
		}
	}
}
