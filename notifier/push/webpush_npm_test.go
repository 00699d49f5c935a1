package push_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/notifier/push/pushtest"
)

// The interop test checks this package against the npm web-push library,
// the sender most Web Push servers use, pinned in testdata/npm/package.json
// with the http_ece it encrypts with. testdata/npm/install.sh installs them
// (npm ci from the lock file) when they are missing or another version.
var pinnedNPM = map[string]string{"web-push": "3.6.7", "http_ece": "1.2.0"}

const npmDir = "testdata/npm"

var (
	npmOnce sync.Once
	npmErr  error
)

// webpushNPM makes sure node and the pinned packages are there; the test
// fails (never skips) when they are not.
func webpushNPM(t *testing.T) {
	t.Helper()
	npmOnce.Do(func() {
		if _, err := exec.LookPath("node"); err != nil {
			npmErr = fmt.Errorf("node is missing: the Web Push interop test runs the npm web-push library; install Debian's nodejs and npm (sh contracts/typescript/scripts/install-node.sh)")
			return
		}
		if npmVersionsOK() == nil {
			return
		}
		if out, err := exec.Command("sh", filepath.Join(npmDir, "install.sh")).CombinedOutput(); err != nil {
			npmErr = fmt.Errorf("sh notifier/push/%s/install.sh: %v\n%s", npmDir, err, out)
			return
		}
		npmErr = npmVersionsOK()
	})
	if npmErr != nil {
		t.Fatal(npmErr)
	}
}

func npmVersionsOK() error {
	for name, want := range pinnedNPM {
		raw, err := os.ReadFile(filepath.Join(npmDir, "node_modules", name, "package.json"))
		if err != nil {
			return err
		}
		var pkg struct{ Version string }
		if err := json.Unmarshal(raw, &pkg); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if pkg.Version != want {
			return fmt.Errorf("%s is %s, want %s", name, pkg.Version, want)
		}
	}
	return nil
}

// interop runs testdata/npm/interop.js with req and decodes its answer.
func interop(t *testing.T, req map[string]any, answer any) {
	t.Helper()
	webpushNPM(t)
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "interop.js")
	cmd.Dir = npmDir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node interop.js %s: %v\n%s", req["op"], err, stderr.String())
	}
	if err := json.Unmarshal(out, answer); err != nil {
		t.Fatalf("node interop.js %s answered %q: %v", req["op"], out, err)
	}
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestWebPushNPMDecryptsOurMessages: what Encrypt sends, http_ece (the
// library web-push encrypts with) opens with the subscription's private
// key and auth secret, at every size a message may have.
func TestWebPushNPMDecryptsOurMessages(t *testing.T) {
	ua, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, push.AuthSecretLen)
	_, _ = rand.Read(auth)
	sub := push.Subscription{Endpoint: "https://push.example.net/push/abc", P256DH: ua.PublicKey(), Auth: auth}
	payloads := map[string][]byte{
		"empty":       {},
		"one byte":    {0},
		"json":        []byte(`{"title":"payments.refund","body":"Refund ••••","actions":[{"action":"approve"}]}`),
		"ends in 0x0": append([]byte("trailing zeros stay"), 0, 0),
		"max payload": bytes.Repeat([]byte("x"), push.MaxPayload),
	}
	for name, plain := range payloads {
		t.Run(name, func(t *testing.T) {
			body, err := push.Encrypt(plain, sub)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Plaintext string }
			interop(t, map[string]any{"op": "decrypt", "body": b64url(body), "private_key": b64url(ua.Bytes()), "auth": b64url(auth)}, &got)
			if got.Plaintext != b64url(plain) {
				t.Fatalf("http_ece decrypted %q, want %q", got.Plaintext, b64url(plain))
			}
		})
	}
}

// TestWebPushNPMVerifiesOurVAPID: the Authorization header VAPID writes is
// an ES256 JWT that jws (web-push's JWT library) verifies against k, with
// the claims RFC 8292 asks for.
func TestWebPushNPMVerifiesOurVAPID(t *testing.T) {
	key, err := push.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	v, err := push.NewVAPID(key, "mailto:ops@example.com")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	header, err := v.Authorization("https://push.example.net:8443/push/abc?x=1", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Valid  bool
		Header struct{ Alg, Typ string }
		Claims push.VAPIDClaims
		K      string
	}
	interop(t, map[string]any{"op": "verify_vapid", "authorization": header}, &got)
	want := push.VAPIDClaims{Aud: "https://push.example.net:8443", Exp: now.Add(time.Hour).Unix(), Sub: "mailto:ops@example.com"}
	if !got.Valid || got.Header.Alg != "ES256" || got.Claims != want || got.K != v.PublicKey() {
		t.Fatalf("jws read %+v, want a valid ES256 token with %+v and k %s", got, want, v.PublicKey())
	}
}

// npmRequest is webpush.generateRequestDetails' answer.
type npmRequest struct {
	Method   string
	Endpoint string
	Headers  map[string]any
	Body     string
}

// TestOurPushServiceTakesWebPushNPMMessages: a request web-push builds for
// a subscription (aes128gcm, VAPID with the server's key) passes the test
// push service's checks, which are this package's Decrypt and
// VerifyAuthorization, and decrypts to what was sent.
func TestOurPushServiceTakesWebPushNPMMessages(t *testing.T) {
	srv := pushtest.New()
	defer srv.Close()
	sub := srv.Subscribe()
	key, err := push.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	v, err := push.NewVAPID(key, "https://countersign.example.com/contact")
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"title":"Approve deploy.rollout?","tag":"ap_1"}`)
	var req npmRequest
	interop(t, map[string]any{"op": "request",
		"subscription": map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256DH, "auth": sub.Auth}},
		"payload":      b64url(payload),
		"vapid":        map[string]string{"subject": v.Subject, "publicKey": v.PublicKey(), "privateKey": v.PrivateKey()},
		"options":      map[string]any{"TTL": 600, "urgency": "high", "topic": "ap_1"},
	}, &req)
	if code := replay(t, req); code != http.StatusCreated {
		t.Fatalf("push service answered %d to web-push's request: %v", code, srv.Refused())
	}
	got := srv.Received()
	if len(got) != 1 {
		t.Fatalf("received %d messages, want 1", len(got))
	}
	m := got[0]
	if !bytes.Equal(m.Plaintext, payload) {
		t.Fatalf("decrypted %q, want %q", m.Plaintext, payload)
	}
	if m.VAPIDKey != v.PublicKey() || m.VAPID.Aud != srv.URL() || m.VAPID.Sub != v.Subject {
		t.Fatalf("VAPID k %s claims %+v, want k %s aud %s sub %s", m.VAPIDKey, m.VAPID, v.PublicKey(), srv.URL(), v.Subject)
	}
	if m.TTL != 600 || m.Urgency != "high" || m.Topic != "ap_1" {
		t.Fatalf("TTL %d Urgency %q Topic %q, want 600 high ap_1", m.TTL, m.Urgency, m.Topic)
	}

	// The same request with another subscription's auth secret does not open.
	other := srv.Subscribe()
	interop(t, map[string]any{"op": "request",
		"subscription": map[string]any{"endpoint": other.Endpoint, "keys": map[string]string{"p256dh": other.P256DH, "auth": sub.Auth}},
		"payload":      b64url(payload),
		"vapid":        map[string]string{"subject": v.Subject, "publicKey": v.PublicKey(), "privateKey": v.PrivateKey()},
	}, &req)
	if code := replay(t, req); code != http.StatusBadRequest {
		t.Fatalf("a message for the wrong auth secret was answered %d, want 400", code)
	}
}

// replay sends the request web-push built and returns the status.
func replay(t *testing.T, req npmRequest) int {
	t.Helper()
	body, err := base64.RawURLEncoding.DecodeString(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.NewRequest(strings.ToUpper(req.Method), req.Endpoint, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, val := range req.Headers {
		if !strings.EqualFold(name, "Content-Length") {
			r.Header.Set(name, fmt.Sprint(val))
		}
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
