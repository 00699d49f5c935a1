package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/notifier/push/pushtest"
	"github.com/countersign/countersign/services/api"
)

// setupPush is setup with Web Push on: a VAPID key, loopback push services
// allowed.
func setupPush(t *testing.T) (*env, string) {
	t.Helper()
	e := setup(t)
	priv, err := push.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	v, err := push.NewVAPID(priv, "mailto:ops@example.com")
	if err != nil {
		t.Fatal(err)
	}
	e.url = e.replica(t, func(c *api.Config) { c.Push = api.PushConfig{PublicKey: v.PublicKey(), AllowInsecure: true} })
	return e, v.PublicKey()
}

func subscriptionJSON(sub pushtest.Subscription) string {
	return fmt.Sprintf(`{"endpoint":%q,"keys":{"p256dh":%q,"auth":%q}}`, sub.Endpoint, sub.P256DH, sub.Auth)
}

// The devices page offers this browser the server's VAPID key; a
// subscription posted with the session's CSRF token becomes the person's
// device, listed on their page only, and removed by them only.
func TestInboxDevicesAddListRemove(t *testing.T) {
	e, key := setupPush(t)
	ps := pushtest.New()
	t.Cleanup(ps.Close)
	alice, bob := e.signIn(t, "alice"), e.signIn(t, "bob")
	if body := string(alice.get("/devices").body); !strings.Contains(body, `data-key="`+key+`"`) || !strings.Contains(body, `id="no-devices"`) {
		t.Fatalf("devices page:\n%s", body)
	}
	sub := subscriptionJSON(ps.Subscribe())
	wantCode(t, "without CSRF", alice.post("/devices", url.Values{"subscription": {sub}}), http.StatusForbidden, "invalid_csrf")
	wantCode(t, "not JSON", alice.post("/devices", url.Values{"csrf": {alice.csrf}, "subscription": {"{"}}), http.StatusBadRequest, "malformed")
	wantCode(t, "not a push service", alice.post("/devices", url.Values{"csrf": {alice.csrf}, "name": {"phone"},
		"subscription": {`{"endpoint":"http://example.com/push/1","keys":{"p256dh":"x","auth":"y"}}`}}), http.StatusBadRequest, api.CodeInvalidField)

	r := alice.post("/devices", url.Values{"csrf": {alice.csrf}, "name": {"phone"}, "subscription": {sub}})
	var added struct {
		Device map[string]string `json:"device"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &added) != nil || added.Device["id"] == "" || added.Device["name"] != "phone" || len(added.Device) != 2 {
		t.Fatalf("add a device: %d %s", r.status, r.body)
	}
	id := added.Device["id"]
	if body := string(alice.get("/devices?added=" + id).body); !strings.Contains(body, `data-device-id="`+id+`"`) || !strings.Contains(body, `id="result"`) {
		t.Fatalf("devices page after adding:\n%s", body)
	}
	if body := string(alice.get("/devices").body); !strings.Contains(body, "not notified yet") {
		t.Fatalf("a device never notified: the page does not say so:\n%s", body)
	}
	store, err := push.OpenStore(context.Background(), e.js)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delivered(context.Background(), "alice", []string{id}, time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if body := string(alice.get("/devices").body); !strings.Contains(body, `last notified <time datetime="2026-12-01T09:30:00Z"`) || strings.Contains(body, "not notified yet") {
		t.Fatalf("a device notified: the page does not say when:\n%s", body)
	}
	if body := string(bob.get("/devices").body); strings.Contains(body, id) {
		t.Fatal("bob's devices page lists alice's device")
	}

	if r := alice.post("/devices/"+id+"/remove", url.Values{}); r.status != http.StatusForbidden {
		t.Fatalf("remove without CSRF: %d", r.status)
	}
	if r := bob.post("/devices/"+id+"/remove", url.Values{"csrf": {bob.csrf}}); r.status != http.StatusNotFound || !strings.Contains(string(r.body), "not removed") {
		t.Fatalf("bob removes alice's device: %d %s", r.status, r.body)
	}
	if r := alice.post("/devices/"+id+"/remove", url.Values{"csrf": {alice.csrf}}); r.status != http.StatusSeeOther {
		t.Fatalf("remove: %d %s", r.status, r.body)
	}
	if body := string(alice.get("/devices").body); strings.Contains(body, id) || !strings.Contains(body, `id="no-devices"`) {
		t.Fatalf("devices page after removing:\n%s", body)
	}
}

// Without push set up, the page says so and offers nothing to enable.
func TestInboxDevicesPushOff(t *testing.T) {
	e := setup(t)
	w := e.signIn(t, "alice")
	if body := string(w.get("/devices").body); !strings.Contains(body, `id="push-off"`) || strings.Contains(body, `id="subscribe-form"`) {
		t.Fatalf("devices page without push:\n%s", body)
	}
	wantCode(t, "subscribe without push", w.post("/devices", url.Values{"csrf": {w.csrf}, "subscription": {`{}`}}), http.StatusNotFound, api.CodePushOff)
}

// The manifest, the service worker and the offline page are served to
// anyone, with their types and the inbox's security headers.
func TestInboxAppFiles(t *testing.T) {
	e := setup(t)
	anon := newWebClient(t, e.url)
	for path, ctype := range map[string]string{
		"/manifest.webmanifest": "application/manifest+json",
		"/sw.js":                "text/javascript; charset=utf-8",
		"/offline":              "text/html; charset=utf-8",
		"/assets/icon-192.png":  "image/png",
	} {
		r := anon.get(path)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != ctype || r.header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s: %d %q", path, r.status, r.header.Get("Content-Type"))
		}
	}
	var m struct {
		StartURL string `json:"start_url"`
		Display  string `json:"display"`
		Icons    []struct {
			Src, Sizes, Purpose string
		} `json:"icons"`
	}
	if err := json.Unmarshal(anon.get("/manifest.webmanifest").body, &m); err != nil || m.StartURL != "/" || m.Display != "standalone" || len(m.Icons) != 3 {
		t.Fatalf("manifest: %+v %v", m, err)
	}
	for _, ic := range m.Icons {
		if r := anon.get(ic.Src); r.status != http.StatusOK {
			t.Errorf("icon %s: %d", ic.Src, r.status)
		}
	}
}
