package email_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/notifier/email"
)

func secret(b byte) []byte { return bytes.Repeat([]byte{b}, email.MinSecretLen) }

func newLinks(t *testing.T, keys ...email.Key) *email.Links {
	t.Helper()
	if len(keys) == 0 {
		keys = []email.Key{{ID: "k1", Secret: secret(1)}}
	}
	l, err := email.NewLinks(keys)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var linkNow = time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)

func TestLinksRoundTrip(t *testing.T) {
	l := newLinks(t)
	in := email.Claims{EventID: "0190d1a2-7b3c-7def-8123-456789abcdef", Approver: "alice", Expires: linkNow.Add(time.Hour + 500*time.Millisecond)}
	token, err := l.Sign(in)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^v1\.k1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$`).MatchString(token) {
		t.Fatalf("token %q is not v1.<kid>.<payload>.<sig> in unpadded base64url", token)
	}
	got, err := l.Verify(token, linkNow)
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != in.EventID || got.Approver != in.Approver || !got.Expires.Equal(linkNow.Add(time.Hour)) || got.Expires.Location() != time.UTC {
		t.Errorf("Verify = %+v, want event, approver and expiry (to the second, UTC) of %+v", got, in)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(got.Nonce); err != nil || len(raw) != 16 {
		t.Errorf("Sign filled nonce %q, want 16 random bytes in base64url", got.Nonce)
	}
	again, _ := l.Sign(in)
	if again == token {
		t.Error("two signatures with an empty nonce gave the same token")
	}
	// A given nonce is kept.
	in.Nonce = "fixed-nonce"
	token, _ = l.Sign(in)
	if got, err := l.Verify(token, linkNow); err != nil || got.Nonce != "fixed-nonce" {
		t.Errorf("Verify = %+v, %v, want nonce fixed-nonce", got, err)
	}
}

func TestSignRequiresEventApproverExpiry(t *testing.T) {
	l := newLinks(t)
	full := email.Claims{EventID: "e", Approver: "a", Expires: linkNow}
	for name, c := range map[string]email.Claims{
		"no event":    {Approver: "a", Expires: linkNow},
		"no approver": {EventID: "e", Expires: linkNow},
		"no expiry":   {EventID: "e", Approver: "a"},
	} {
		if _, err := l.Sign(c); err == nil {
			t.Errorf("%s: Sign succeeded", name)
		}
	}
	if _, err := l.Sign(full); err != nil {
		t.Errorf("complete claims: %v", err)
	}
}

// replacePart returns token with its i-th dot-separated field replaced.
func replacePart(token string, i int, s string) string {
	p := strings.Split(token, ".")
	p[i] = s
	return strings.Join(p, ".")
}

func TestVerifyRefusesTamperedTokens(t *testing.T) {
	l := newLinks(t, email.Key{ID: "k1", Secret: secret(1)}, email.Key{ID: "k2", Secret: secret(2)})
	token, err := l.Sign(email.Claims{EventID: "ev-1", Approver: "alice", Expires: linkNow.Add(time.Hour), Nonce: "n"})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(token, ".")
	forged := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"evt":"ev-1","sub":"mallory","exp":%d,"jti":"n"}`, linkNow.Add(time.Hour).Unix()))
	sig := []byte(parts[3])
	if sig[0] == 'A' {
		sig[0] = 'B'
	} else {
		sig[0] = 'A'
	}
	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"payload for another approver", replacePart(token, 2, forged), email.ErrBadSignature},
		{"payload with one more character", replacePart(token, 2, parts[2]+"A"), email.ErrBadSignature},
		{"altered signature", replacePart(token, 3, string(sig)), email.ErrBadSignature},
		{"other known key id", replacePart(token, 1, "k2"), email.ErrBadSignature},
		{"unknown key id", replacePart(token, 1, "k9"), email.ErrUnknownKey},
		{"other version", replacePart(token, 0, "v2"), email.ErrTokenMalformed},
		{"signature not base64", replacePart(token, 3, "!!!"), email.ErrTokenMalformed},
		{"short signature", replacePart(token, 3, "AAAA"), email.ErrTokenMalformed},
		{"three fields", strings.Join(parts[:3], "."), email.ErrTokenMalformed},
		{"five fields", token + ".x", email.ErrTokenMalformed},
		{"empty", "", email.ErrTokenMalformed},
		{"huge", strings.Repeat("a", 5000), email.ErrTokenMalformed},
	}
	for _, tt := range tests {
		got, err := l.Verify(tt.token, linkNow)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Verify error = %v, want %v", tt.name, err, tt.want)
		}
		if got != (email.Claims{}) {
			t.Errorf("%s: Verify returned claims %+v with an error", tt.name, got)
		}
		for _, other := range []error{email.ErrTokenMalformed, email.ErrUnknownKey, email.ErrBadSignature, email.ErrTokenExpired} {
			if other != tt.want && errors.Is(err, other) {
				t.Errorf("%s: error %v also matches %v", tt.name, err, other)
			}
		}
	}
	if _, err := l.Verify(token, linkNow); err != nil {
		t.Errorf("the untampered token: %v", err)
	}
}

func TestVerifyExpiry(t *testing.T) {
	l := newLinks(t)
	exp := linkNow.Add(time.Hour)
	token, _ := l.Sign(email.Claims{EventID: "ev-1", Approver: "alice", Expires: exp})
	if _, err := l.Verify(token, exp.Add(-time.Second)); err != nil {
		t.Errorf("a second before expiry: %v", err)
	}
	for _, now := range []time.Time{exp, exp.Add(time.Second), exp.Add(72 * time.Hour)} {
		got, err := l.Verify(token, now)
		if !errors.Is(err, email.ErrTokenExpired) {
			t.Errorf("at %s: error %v, want ErrTokenExpired", now, err)
		}
		if got.EventID != "ev-1" || got.Approver != "alice" {
			t.Errorf("at %s: an expired token's claims = %+v, want them returned", now, got)
		}
	}
}

func TestLinksKeyRotation(t *testing.T) {
	old := email.Key{ID: "2026-01", Secret: secret(1)}
	next := email.Key{ID: "2026-07", Secret: secret(2)}
	claims := email.Claims{EventID: "ev-1", Approver: "alice", Expires: linkNow.Add(time.Hour)}

	oldToken, _ := newLinks(t, old).Sign(claims)
	rotated := newLinks(t, next, old)
	if got, err := rotated.Verify(oldToken, linkNow); err != nil || got.Approver != "alice" {
		t.Errorf("a token of the old key after rotation: %+v, %v", got, err)
	}
	newToken, _ := rotated.Sign(claims)
	if !strings.HasPrefix(newToken, "v1.2026-07.") {
		t.Errorf("rotated Links signed %q, want the first key (2026-07)", newToken)
	}
	if _, err := newLinks(t, old).Verify(newToken, linkNow); !errors.Is(err, email.ErrUnknownKey) {
		t.Errorf("a token of the new key on Links without it: %v, want ErrUnknownKey", err)
	}
	retired := newLinks(t, next)
	if _, err := retired.Verify(oldToken, linkNow); !errors.Is(err, email.ErrUnknownKey) {
		t.Errorf("a token of a retired key: %v, want ErrUnknownKey", err)
	}
}

func TestVoteID(t *testing.T) {
	a := email.Claims{EventID: "ev-1", Approver: "alice", Expires: linkNow, Nonce: "nonce-a"}
	id := email.VoteID(a)
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 5 {
		t.Fatalf("VoteID = %q (%v), want a version 5 UUID", id, err)
	}
	for range 3 {
		if email.VoteID(a) != id {
			t.Fatal("VoteID is not deterministic")
		}
	}
	b := a
	b.Nonce = "nonce-b"
	if email.VoteID(b) == id {
		t.Error("two nonces gave one vote id")
	}
}

func TestNewLinksRefusesBadKeys(t *testing.T) {
	tests := map[string][]email.Key{
		"no keys":          nil,
		"short secret":     {{ID: "k1", Secret: bytes.Repeat([]byte{1}, email.MinSecretLen-1)}},
		"empty id":         {{ID: "", Secret: secret(1)}},
		"id with a dot":    {{ID: "k.1", Secret: secret(1)}},
		"duplicate id":     {{ID: "k1", Secret: secret(1)}, {ID: "k1", Secret: secret(2)}},
		"second too short": {{ID: "k1", Secret: secret(1)}, {ID: "k2", Secret: []byte("short")}},
	}
	for name, keys := range tests {
		if _, err := email.NewLinks(keys); err == nil {
			t.Errorf("%s: NewLinks succeeded", name)
		}
	}
}

func TestParseKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xfb}, 32)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		k, err := email.ParseKey("2026-07:" + enc.EncodeToString(raw))
		if err != nil || k.ID != "2026-07" || !bytes.Equal(k.Secret, raw) {
			t.Errorf("ParseKey(%q) = %v, %v", "2026-07:"+enc.EncodeToString(raw), k, err)
		}
	}
	short := base64.StdEncoding.EncodeToString([]byte("only-sixteen-byt"))
	for _, s := range []string{"no-colon", "k1:" + short, "k1:not base64!", ":" + base64.StdEncoding.EncodeToString(raw)} {
		_, err := email.ParseKey(s)
		if err == nil {
			t.Errorf("ParseKey(%q) succeeded", s)
			continue
		}
		if strings.Contains(err.Error(), short) || strings.Contains(err.Error(), "only-sixteen") {
			t.Errorf("ParseKey(%q) error %q shows the secret", s, err)
		}
	}
}

func TestKeyFormattingHidesSecret(t *testing.T) {
	k := email.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v", k), fmt.Sprintf("%+v", k), fmt.Sprintf("%#v", k)} {
		if strings.Contains(s, "0123456789") || strings.Contains(s, "48 49 50") || !strings.Contains(s, "k1") {
			t.Errorf("formatted key %q shows the secret or hides the id", s)
		}
	}
}

// recordedLink is a token minted by an earlier version of Links, with the
// key 2026-07 of seven-bytes and the claims below: links already in
// mailboxes must keep verifying, and a link signed now must be the same
// bytes.
const recordedLink = "v1.2026-07.eyJldnQiOiIwMTkwZDFhMi03YjNjLTdkZWYtODEyMy00NTY3ODlhYmNkZWYiLCJzdWIiOiJhbGljZSIsImV4cCI6MTc4MjkwMzYwMCwianRpIjoicmVjb3JkZWQtbm9uY2UifQ.gBi-WttwKcFWRVW-OwI1BggCGr2haoZqmr6TlA4EFgA"

func TestRecordedLinkStillVerifies(t *testing.T) {
	l := newLinks(t, email.Key{ID: "2026-07", Secret: secret(7)})
	want := email.Claims{EventID: "0190d1a2-7b3c-7def-8123-456789abcdef", Approver: "alice", Expires: linkNow.Add(time.Hour), Nonce: "recorded-nonce"}
	got, err := l.Verify(recordedLink, linkNow)
	if err != nil || got != want {
		t.Fatalf("Verify(recorded link) = %+v, %v, want %+v", got, err, want)
	}
	if token, err := l.Sign(want); err != nil || token != recordedLink {
		t.Errorf("Sign = %q, %v, want the recorded bytes %q", token, err, recordedLink)
	}
}
