package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/serviceworker"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/notifier/push/pushtest"
)

// Approving from a phone, in a real browser: the inbox installs as an app
// (the manifest and the service worker pass Chromium's own checks), a
// device is added on the Devices page, the server's Web Push channel sends
// a request to it (through the test push service, which decrypts it as a
// browser would), the very payload is delivered to the service worker
// through the DevTools protocol, the worker shows the notification with
// Approve and Reject, and its notificationclick handler, given the Approve
// action, posts the signed token, which decides the request.

// shownNotification is a notification as the service worker's
// registration lists it.
type shownNotification struct {
	Title   string   `json:"title"`
	Body    string   `json:"body"`
	Tag     string   `json:"tag"`
	Actions []string `json:"actions"`
	URL     string   `json:"url"`
	Result  string   `json:"result"`
	Status  string   `json:"status"`
}

// notificationsJS lists the shown notifications, from a page of the site.
const notificationsJS = `navigator.serviceWorker.ready.then(function (r) { return r.getNotifications(); }).then(function (ns) {
  return ns.map(function (n) { var d = n.data || {}; return {title: n.title, body: n.body, tag: n.tag,
    actions: n.actions.map(function (a) { return a.action; }), url: d.url || "", result: d.result || "", status: d.status || ""}; });
})`

// notificationsUntil polls the shown notifications until one satisfies ok.
func notificationsUntil(t *testing.T, ctx context.Context, what string, ok func(shownNotification) bool) shownNotification {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last []shownNotification
	for time.Now().Before(deadline) {
		ns, err := chromedp.Run(ctx, chromedp.Evaluate[[]shownNotification](notificationsJS, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("list the notifications: %v", err)
		}
		if i := slices.IndexFunc(ns, ok); i >= 0 {
			return ns[i]
		}
		last = ns
		do(t, ctx, chromedp.Sleep(50*time.Millisecond))
	}
	t.Fatalf("no notification %s; shown: %+v", what, last)
	return shownNotification{}
}

// localhost is the stack's URL at localhost (a secure context, as
// 127.0.0.1 is; the name a phone's browser would see is an https one).
func localhost(t *testing.T, st *stack) string {
	t.Helper()
	u, err := url.Parse(st.url)
	if err != nil {
		t.Fatal(err)
	}
	return "http://localhost:" + u.Port()
}

// installable checks the page's manifest and installability as Chromium
// judges them.
func installable(t *testing.T, ctx context.Context) {
	t.Helper()
	m, err := chromedp.Call(ctx, page.GetAppManifest, page.GetAppManifestParams{})
	if err != nil {
		t.Fatalf("Page.getAppManifest: %v", err)
	}
	for _, e := range m.Errors {
		t.Errorf("the manifest: %s (line %d)", e.Message, e.Line)
	}
	if m.Manifest == nil || m.Manifest.Name != "Countersign" || !strings.EqualFold(strings.TrimPrefix(m.Manifest.Display, "k"), "standalone") || len(m.Manifest.Icons) != 3 ||
		!strings.HasSuffix(m.Manifest.StartURL, "/") {
		t.Errorf("the manifest as parsed: %+v", m.Manifest)
	}
	inst, err := chromedp.Call(ctx, page.GetInstallabilityErrors, cdp.Empty{})
	if err != nil {
		t.Fatalf("Page.getInstallabilityErrors: %v", err)
	}
	for _, e := range inst.InstallabilityErrors {
		t.Errorf("not installable: %s %+v", e.ErrorID, e.ErrorArguments)
	}
}

// registration waits for the site's service worker registration and
// returns its id.
func registration(t *testing.T, ctx context.Context, base string) serviceworker.RegistrationID {
	t.Helper()
	enable := func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, serviceworker.Enable, cdp.Empty{})
		return chromedp.Void{}, err
	}
	var id serviceworker.RegistrationID
	match := func(ev serviceworker.EventWorkerRegistrationUpdated) bool {
		for _, r := range ev.Registrations {
			if r.ScopeURL == base+"/" && !r.IsDeleted {
				id = r.RegistrationID
			}
		}
		return id != ""
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(sctx, chromedp.WaitEvent(serviceworker.WorkerRegistrationUpdated, match, enable)); err != nil {
		t.Fatalf("the service worker's registration: %v", err)
	}
	return id
}

// workerContext attaches to the site's service worker.
func workerContext(t *testing.T, ctx context.Context, base string) context.Context {
	t.Helper()
	targets, err := chromedp.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range targets {
		if ti.Type == "service_worker" && ti.URL == base+"/sw.js" {
			wctx, cancel := chromedp.NewContext(ctx, chromedp.WithTargetID(ti.TargetID))
			t.Cleanup(cancel)
			if err := chromedp.Do(wctx); err != nil {
				t.Fatalf("attach to the service worker: %v", err)
			}
			return wctx
		}
	}
	t.Fatalf("no service worker target at %s/sw.js among %d targets", base, len(targets))
	return nil
}

// sendPush has the server's Web Push channel tell alice of id, and returns
// the payload the test push service decrypted.
func sendPush(t *testing.T, ctx context.Context, st *stack, ps *pushtest.Server, base, id string) []byte {
	t.Helper()
	store, err := push.OpenStore(ctx, st.push.js)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := push.New(push.Config{VAPID: st.push.vapid, Devices: store, Actions: st.push.actions, PublicURL: base, AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Record contracts.Record `json:"record"`
	}
	st.apiCall(t, http.MethodGet, "/v1/approvals/"+id, "alice", "", &rec)
	if _, err := ch.Notify(ctx, notifier.Requested(rec.Record.Request, notifier.Target{Approver: "alice", Address: "alice"})); err != nil {
		t.Fatalf("push: %v (refused: %v)", err, ps.Refused())
	}
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	msg, err := ps.Next(nctx)
	if err != nil {
		t.Fatalf("the push service got nothing: %v (refused: %v)", err, ps.Refused())
	}
	return msg.Plaintext
}

func TestBrowserInstallsAndApprovesFromANotification(t *testing.T) {
	axe(t)
	st := startStack(t)
	base := localhost(t, st)
	ps := pushtest.New()
	t.Cleanup(ps.Close)
	ctx := newBrowser(t, 3*time.Minute)
	if _, err := chromedp.CallBrowser(ctx, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"}, Setting: browser.PermissionSettingGranted, Origin: base,
	}); err != nil {
		t.Fatalf("Browser.setPermission: %v", err)
	}

	stage(t, ctx, "sign in; the service worker takes the page",
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		typeInto(chromedp.ID("token"), st.tokens["alice"]),
		click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("rows")),
		until(`navigator.serviceWorker.controller !== null && navigator.serviceWorker.controller.state === "activated"`),
	)
	installable(t, ctx)
	regID := registration(t, ctx, base)

	addDevice(t, ctx, st, ps, base)
	id := st.pending(t, context.Background(), "billing-bot", "run-phone-1", refund("c1", 240, "Acme"))
	payload := sendPush(t, context.Background(), st, ps, base, id)
	if _, err := chromedp.Call(ctx, serviceworker.DeliverPushMessage, serviceworker.DeliverPushMessageParams{
		Origin: base, RegistrationID: regID, Data: string(payload)}); err != nil {
		t.Fatalf("ServiceWorker.deliverPushMessage: %v", err)
	}
	n := notificationsUntil(t, ctx, "for the refund", func(n shownNotification) bool { return strings.Contains(n.Title, "billing.refund") })
	if !slices.Equal(n.Actions, []string{"approve", "reject"}) || n.URL != base+"/approvals/"+id ||
		!strings.Contains(n.Body, "Refund 240 EUR to Acme") || !strings.Contains(n.Body, "High risk") || !strings.Contains(n.Body, "due ") {
		t.Fatalf("the notification: %+v", n)
	}
	t.Logf("shown: %q: %q", n.Title, n.Body)

	// A system notification cannot be clicked headlessly: the worker gets
	// the event its notificationclick listener would, built from the
	// notification it shows, with the Approve action.
	worker := workerContext(t, ctx, base)
	if _, err := chromedp.Run(worker, chromedp.Evaluate[bool](`self.registration.getNotifications().then(function (ns) {
  self.dispatchEvent(new NotificationEvent("notificationclick", {notification: ns[0], action: "approve"}));
  return true;
})`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("dispatch notificationclick: %v", err)
	}
	res := notificationsUntil(t, ctx, "saying the approval counted", func(n shownNotification) bool { return n.Result != "" })
	if res.Result != "counted" || res.Status != contracts.StatusApproved || res.Title != "Approved: billing.refund" || res.URL != n.URL {
		t.Fatalf("the answer to the tap: %+v", res)
	}
	t.Logf("then: %q: %q", res.Title, res.Body)
	var rec struct {
		Record contracts.Record `json:"record"`
	}
	st.apiCall(t, http.MethodGet, "/v1/approvals/"+id, "alice", "", &rec)
	if rec.Record.Status != contracts.StatusApproved || len(rec.Record.Votes) != 1 ||
		rec.Record.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaPush}) {
		t.Fatalf("the record after the tap: %s %+v", rec.Record.Status, rec.Record.Votes)
	}
	// The push was recorded on the device by the notifier's own NATS user.
	stage(t, ctx, "the devices page says when the device was last notified", chromedp.Navigate(base+"/devices"),
		chromedp.WaitVisible(chromedp.CSS(`#devices .device .notified time`)))
	shellOnly(t, ctx)
	offline(t, ctx, worker, base)
}

// addDevice adds the test push service's subscription as alice's device
// through the Devices page's own route, and checks the page lists it.
func addDevice(t *testing.T, ctx context.Context, st *stack, ps *pushtest.Server, base string) {
	t.Helper()
	sub := ps.Subscribe()
	subJSON, err := json.Marshal(map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256DH, "auth": sub.Auth}})
	if err != nil {
		t.Fatal(err)
	}
	stage(t, ctx, "open the devices page", chromedp.Navigate(base+"/devices"), chromedp.WaitVisible(chromedp.ID("no-devices")),
		until(`!document.getElementById("subscribe").disabled`))
	post := fmt.Sprintf(`(function () {
  var f = new URLSearchParams({csrf: document.querySelector("#subscribe-form input[name=csrf]").value, name: "phone", subscription: %q});
  return fetch("/devices", {method: "POST", body: f}).then(function (r) { return r.json(); }).then(function (a) { return a.device ? a.device.id : JSON.stringify(a); });
})()`, subJSON)
	devID, err := chromedp.Run(ctx, chromedp.Evaluate[string](post, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("post the subscription: %v", err)
	}
	stage(t, ctx, "the device is listed", chromedp.Navigate(base+"/devices?added="+url.QueryEscape(devID)),
		chromedp.WaitVisible(chromedp.CSS(`#devices .device[data-device-id="`+devID+`"]`)), chromedp.WaitVisible(chromedp.ID("result")))
}

// shellOnly checks that the service worker's cache holds the offline page
// and the inbox's static files, and nothing else: no page, no approval.
func shellOnly(t *testing.T, ctx context.Context) {
	t.Helper()
	cached, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`caches.keys().then(function (ks) { return Promise.all(ks.map(function (k) { return caches.open(k).then(function (c) { return c.keys(); }); })); })
  .then(function (all) { return [].concat.apply([], all).map(function (r) { return new URL(r.url).pathname; }).sort(); })`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("read the caches: %v", err)
	}
	want := []string{"/assets/app.js", "/assets/devices.js", "/assets/favicon.svg", "/assets/icon-192.png", "/assets/icon-512.png",
		"/assets/icon-maskable-512.png", "/assets/inbox.css", "/assets/inbox.js", "/assets/passkeys.js", "/offline"}
	if !slices.Equal(cached, want) {
		t.Fatalf("the service worker keeps %v, want %v", cached, want)
	}
}

// subscribeDevice subscribes sub as the named person's device through the
// API.
func (st *stack) subscribeDevice(t *testing.T, who, name string, sub pushtest.Subscription) {
	t.Helper()
	body := fmt.Sprintf(`{"endpoint":%q,"keys":{"p256dh":%q,"auth":%q},"device_name":%q}`, sub.Endpoint, sub.P256DH, sub.Auth, name)
	req, err := http.NewRequest(http.MethodPost, st.url+"/v1/push/subscriptions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+st.tokens[who])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("subscribe %s's %s: %d", who, name, resp.StatusCode)
	}
}

// offline cuts the page and the service worker off the network: a page
// opened then is the offline page, styled from the worker's cache.
func offline(t *testing.T, ctx, worker context.Context, base string) {
	t.Helper()
	// Network.emulateNetworkConditions is called by name: cdproto v0.159
	// has only its rule-based successor, which Chromium refuses for these
	// parameters; this one takes effect on the page and the worker alike.
	off := map[string]any{"offline": true, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
	for _, c := range []context.Context{ctx, worker} {
		err := chromedp.Do(c, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			return tg.Call(ctx, "Network.emulateNetworkConditions", off, nil)
		}))
		if err != nil {
			t.Fatalf("Network.emulateNetworkConditions: %v", err)
		}
	}
	stage(t, ctx, "open a page offline", chromedp.Navigate(base+"/history"), chromedp.WaitVisible(chromedp.ID("offline")))
	if !eval[bool](t, ctx, `getComputedStyle(document.querySelector(".top")).display === "flex" && document.getElementById("rows") === null`) {
		t.Fatal("the offline page is not styled by the cached style sheet, or shows approvals")
	}
}
