package webhook_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/countersign/countersign/notifier/webhook"
)

// vector is a signing example published with the Standard Webhooks
// specification's libraries.
type vector struct {
	secret, id string
	ts         int64
	body       string
	want       string
}

var (
	vectorGo = vector{
		secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		id:     "msg_p5jXN8AQM9LWM0D4loKWxJek",
		ts:     1614265330,
		body:   `{"test": 2432232314}`,
		want:   "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
	}
	vectorRust = vector{
		secret: "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
		id:     "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
		ts:     1649367553,
		body:   `{"email":"test@example.com","username":"test_user"}`,
		want:   "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
	}
)

func (v vector) key(t *testing.T) []byte {
	t.Helper()
	k, err := webhook.ParseSecret(v.secret)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return k
}

func (v vector) time() time.Time { return time.Unix(v.ts, 0) }

func headers(id string, ts int64, sigs ...string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, strings.Join(sigs, " "))
	return h
}

func TestSignSpecVectors(t *testing.T) {
	for _, v := range []vector{vectorGo, vectorRust} {
		key := v.key(t)
		got := webhook.Sign(key, v.id, v.time(), []byte(v.body))
		if got != v.want {
			t.Errorf("Sign(%s) = %s, want %s", v.id, got, v.want)
		}
		// The time zone and sub-second part of ts do not matter.
		local := v.time().Add(999 * time.Millisecond).In(time.FixedZone("X", 5*3600))
		if got := webhook.Sign(key, v.id, local, []byte(v.body)); got != v.want {
			t.Errorf("Sign(%s) at %v = %s, want %s", v.id, local, got, v.want)
		}
		if err := webhook.Verify([][]byte{key}, headers(v.id, v.ts, v.want), []byte(v.body), v.time(), 0); err != nil {
			t.Errorf("Verify(%s) = %v", v.id, err)
		}
		ref, err := standardwebhooks.NewWebhook(v.secret)
		if err != nil {
			t.Fatal(err)
		}
		if refSig, _ := ref.Sign(v.id, v.time(), []byte(v.body)); refSig != got {
			t.Errorf("the reference library signs %s as %s, Sign as %s", v.id, refSig, got)
		}
	}
}

func TestVerifyRejectsNegativeVectors(t *testing.T) {
	tests := []struct {
		name string
		v    vector
		sig  string
	}{
		{"wrong signature", vectorGo, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="},
		{"partial signature", vectorGo, "v1,"},
		{"version only", vectorGo, "v1"},
		{"rust wrong signature", vectorRust, "v1,R3PTzyfHASBKHH98a7yexTwaJ4yNIcGhFQc1yuN+BPU="},
		{"signature of the other vector", vectorRust, vectorGo.want},
		{"not base64", vectorGo, "v1,!!!!"},
		{"truncated signature", vectorGo, vectorGo.want[:len(vectorGo.want)-4]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := webhook.Verify([][]byte{tt.v.key(t)}, headers(tt.v.id, tt.v.ts, tt.sig), []byte(tt.v.body), tt.v.time(), 0)
			if !errors.Is(err, webhook.ErrNoMatchingSignature) {
				t.Errorf("Verify = %v, want ErrNoMatchingSignature", err)
			}
		})
	}
}

func TestVerifyRejectsTampering(t *testing.T) {
	v := vectorGo
	key := v.key(t)
	tests := []struct {
		name string
		id   string
		ts   int64
		body string
	}{
		{"body", v.id, v.ts, `{"test": 2432232315}`},
		{"re-encoded body", v.id, v.ts, `{"test":2432232314}`},
		{"id", v.id + "x", v.ts, v.body},
		{"timestamp", v.id, v.ts + 1, v.body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := webhook.Verify([][]byte{key}, headers(tt.id, tt.ts, v.want), []byte(tt.body), v.time(), 0)
			if !errors.Is(err, webhook.ErrNoMatchingSignature) {
				t.Errorf("Verify = %v, want ErrNoMatchingSignature", err)
			}
		})
	}
}

func TestVerifyAcceptsAnyV1SignatureUnderAnyKey(t *testing.T) {
	v := vectorGo
	key := v.key(t)
	other := make([]byte, 32)
	body, now := []byte(v.body), v.time()
	rawSig := strings.TrimPrefix(v.want, "v1,")
	wrong := "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="

	pass := map[string]struct {
		keys [][]byte
		h    http.Header
	}{
		"among other versions and wrong ones": {[][]byte{key}, headers(v.id, v.ts, "v1a,"+rawSig, "v2,abc", wrong, v.want)},
		"second of two keys":                  {[][]byte{other, key}, headers(v.id, v.ts, v.want)},
		"extra spaces":                        {[][]byte{key}, headers(v.id, v.ts, "", wrong, "", v.want, "")},
	}
	multi := headers(v.id, v.ts, wrong)
	multi.Add(webhook.HeaderSignature, v.want)
	pass["second header line"] = struct {
		keys [][]byte
		h    http.Header
	}{[][]byte{key}, multi}
	for name, tt := range pass {
		if err := webhook.Verify(tt.keys, tt.h, body, now, 0); err != nil {
			t.Errorf("%s: Verify = %v, want nil", name, err)
		}
	}

	fail := map[string]struct {
		keys [][]byte
		h    http.Header
	}{
		"right signature under another version": {[][]byte{key}, headers(v.id, v.ts, "v1a,"+rawSig, "v2,"+rawSig)},
		"other key only":                        {[][]byte{other}, headers(v.id, v.ts, v.want)},
		"no keys":                               {nil, headers(v.id, v.ts, v.want)},
	}
	for name, tt := range fail {
		if err := webhook.Verify(tt.keys, tt.h, body, now, 0); !errors.Is(err, webhook.ErrNoMatchingSignature) {
			t.Errorf("%s: Verify = %v, want ErrNoMatchingSignature", name, err)
		}
	}
}

// TestVerifyIgnoresEmptyKeys: a message signed with an empty key, which
// anyone can compute, is not accepted because of an empty entry in keys.
func TestVerifyIgnoresEmptyKeys(t *testing.T) {
	v := vectorGo
	forged := webhook.Sign(nil, v.id, v.time(), []byte(v.body))
	err := webhook.Verify([][]byte{nil, {}}, headers(v.id, v.ts, forged), []byte(v.body), v.time(), 0)
	if !errors.Is(err, webhook.ErrNoMatchingSignature) {
		t.Errorf("Verify with empty keys = %v, want ErrNoMatchingSignature", err)
	}
}

func TestVerifyMissingHeaders(t *testing.T) {
	v := vectorGo
	for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
		h := headers(v.id, v.ts, v.want)
		h.Del(name)
		if err := webhook.Verify([][]byte{v.key(t)}, h, []byte(v.body), v.time(), 0); !errors.Is(err, webhook.ErrMissingHeaders) {
			t.Errorf("without %s: Verify = %v, want ErrMissingHeaders", name, err)
		}
	}
	blank := headers(v.id, v.ts, "  ")
	if err := webhook.Verify([][]byte{v.key(t)}, blank, []byte(v.body), v.time(), 0); !errors.Is(err, webhook.ErrMissingHeaders) {
		t.Errorf("with a blank signature header: Verify = %v, want ErrMissingHeaders", err)
	}
}

func TestVerifyBadTimestamp(t *testing.T) {
	v := vectorGo
	for _, ts := range []string{"abc", "-1614265330", "+1614265330", "1614265330.5", " 1614265330", "1614265330s", "99999999999999999999"} {
		h := headers(v.id, v.ts, v.want)
		h.Set(webhook.HeaderTimestamp, ts)
		if err := webhook.Verify([][]byte{v.key(t)}, h, []byte(v.body), v.time(), 0); !errors.Is(err, webhook.ErrBadTimestamp) {
			t.Errorf("timestamp %q: Verify = %v, want ErrBadTimestamp", ts, err)
		}
	}
}

func TestVerifyTolerance(t *testing.T) {
	v := vectorGo
	sent := v.time()
	tests := []struct {
		name      string
		now       time.Time
		tolerance time.Duration
		want      error
	}{
		{"same second", sent, 0, nil},
		{"default tolerance late edge", sent.Add(5 * time.Minute), 0, nil},
		{"default tolerance early edge", sent.Add(-5 * time.Minute), 0, nil},
		{"too old for the default", sent.Add(5*time.Minute + time.Second), 0, webhook.ErrTooOld},
		{"too new for the default", sent.Add(-5*time.Minute - time.Second), 0, webhook.ErrTooNew},
		{"negative tolerance means the default", sent.Add(4 * time.Minute), -time.Second, nil},
		{"within a custom tolerance", sent.Add(30 * time.Second), 30 * time.Second, nil},
		{"too old for a custom tolerance", sent.Add(31 * time.Second), 30 * time.Second, webhook.ErrTooOld},
		{"too new for a custom tolerance", sent.Add(-31 * time.Second), 30 * time.Second, webhook.ErrTooNew},
		{"within a long tolerance", sent.Add(time.Hour), 2 * time.Hour, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := webhook.Verify([][]byte{v.key(t)}, headers(v.id, v.ts, v.want), []byte(v.body), tt.now, tt.tolerance)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParseSecret(t *testing.T) {
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	valid := map[string]int{
		vectorGo.secret: 24,
		strings.TrimPrefix(vectorGo.secret, "whsec_"): 24,
		"whsec_" + b64(32):                            32,
		"whsec_" + b64(64):                            64,
		" whsec_" + b64(32) + "\n":                    32,
	}
	for s, n := range valid {
		key, err := webhook.ParseSecret(s)
		if err != nil || len(key) != n {
			t.Errorf("ParseSecret(%q) = %d bytes, %v; want %d bytes", s, len(key), err, n)
		}
	}
	key, _ := webhook.ParseSecret(vectorGo.secret)
	want, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(vectorGo.secret, "whsec_"))
	if string(key) != string(want) {
		t.Errorf("ParseSecret decoded %x, want %x", key, want)
	}

	invalid := []string{
		"",
		"whsec_",
		"   ",
		"whsec_" + b64(23),
		"whsec_" + b64(65),
		"whsec_" + b64(16),
		"whsec_not base64 at all!",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", // cut short
		"whsk_" + b64(32),
		"whsec_" + base64.URLEncoding.EncodeToString([]byte(strings.Repeat("\xff", 32))),
	}
	for _, s := range invalid {
		_, err := webhook.ParseSecret(s)
		if !errors.Is(err, webhook.ErrInvalidSecret) {
			t.Errorf("ParseSecret(%q) = %v, want ErrInvalidSecret", s, err)
			continue
		}
		secret := strings.TrimSpace(strings.TrimPrefix(s, "whsec_"))
		if secret != "" && strings.Contains(err.Error(), secret) {
			t.Errorf("ParseSecret error %q shows the secret", err)
		}
	}
}
