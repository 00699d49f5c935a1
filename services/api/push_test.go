package api_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/notifier/push/pushtest"
	"github.com/countersign/countersign/services/api"
)

// setupPush is the test server with Web Push on: its VAPID key and the
// action keys the notifier would sign with.
func setupPush(t *testing.T) (*env, *push.Actions, string) {
	t.Helper()
	e := setup(t)
	acts, err := push.NewActions([]push.Key{{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef-api")}})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := push.GenerateVAPIDKey()
	vapid, err := push.NewVAPID(key, "mailto:ops@example.com")
	if err != nil {
		t.Fatal(err)
	}
	on := *e
	on.url = e.replica(t, func(c *api.Config) {
		c.Push = api.PushConfig{PublicKey: vapid.PublicKey(), Actions: acts, AllowInsecure: true}
	})
	return &on, acts, vapid.PublicKey()
}

func TestPushSubscriptionsArePerPersonAndChecked(t *testing.T) {
	e, _, key := setupPush(t)
	var k struct {
		PublicKey string `json:"public_key"`
	}
	e.call(t, "GET", "/v1/push/key", "", nil).decode(t, &k)
	if k.PublicKey != key {
		t.Fatalf("key %q, want %q", k.PublicKey, key)
	}
	ps := pushtest.New()
	defer ps.Close()
	sub := ps.Subscribe()
	body := func(endpoint, p256dh, auth, name string) map[string]any {
		return map[string]any{"endpoint": endpoint, "keys": map[string]string{"p256dh": p256dh, "auth": auth}, "device_name": name}
	}
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{body("http://push.example.com/x", sub.P256DH, sub.Auth, ""), "endpoint"},
		{body("ftp://push.example.com/x", sub.P256DH, sub.Auth, ""), "endpoint"},
		{body(sub.Endpoint, sub.P256DH[:20], sub.Auth, ""), "keys.p256dh"},
		{body(sub.Endpoint, sub.P256DH, "AAAA", ""), "keys.auth"},
		{body(sub.Endpoint, sub.P256DH, sub.Auth, "a\nb"), "device_name"},
	} {
		e.call(t, "POST", "/v1/push/subscriptions", "alice", c.body).wantError(t, http.StatusBadRequest, api.CodeInvalidField, c.field)
	}
	r := e.call(t, "POST", "/v1/push/subscriptions", "alice", body(sub.Endpoint, sub.P256DH, sub.Auth, "Pixel"))
	var dev api.PushDevice
	r.decode(t, &dev)
	if r.status != http.StatusCreated || dev.ID == "" || dev.Name != "Pixel" {
		t.Fatalf("subscribe: %d %s", r.status, r.body)
	}
	var list struct {
		Devices []api.PushDevice `json:"devices"`
	}
	e.call(t, "GET", "/v1/push/subscriptions", "alice", nil).decode(t, &list)
	if len(list.Devices) != 1 || list.Devices[0].ID != dev.ID {
		t.Fatalf("alice's devices: %+v", list.Devices)
	}
	if list.Devices[0].LastDeliveredAt != "" {
		t.Fatalf("a device never notified lists last_delivered_at %q", list.Devices[0].LastDeliveredAt)
	}
	// The notifier, as its own NATS user, records a delivery; an older one
	// that finishes later does not move it back.
	store, err := push.OpenStore(context.Background(), e.srv.JetStreamAs(embedded.RoleNotifier))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	for _, when := range []time.Time{at, at.Add(-time.Hour)} {
		if err := store.Delivered(context.Background(), "alice", []string{dev.ID, "someone-elses"}, when); err != nil {
			t.Fatal(err)
		}
	}
	e.call(t, "GET", "/v1/push/subscriptions", "alice", nil).decode(t, &list)
	if len(list.Devices) != 1 || list.Devices[0].LastDeliveredAt != "2026-12-01T09:30:00Z" {
		t.Fatalf("after a delivery: %+v, want last_delivered_at 2026-12-01T09:30:00Z", list.Devices)
	}
	e.call(t, "GET", "/v1/push/subscriptions", "bob", nil).decode(t, &list)
	if len(list.Devices) != 0 {
		t.Fatalf("bob sees devices: %+v", list.Devices)
	}
	e.call(t, "DELETE", "/v1/push/subscriptions/"+dev.ID, "bob", nil).wantError(t, http.StatusNotFound, api.CodeNotFound, "")
	if r := e.call(t, "DELETE", "/v1/push/subscriptions/"+dev.ID, "alice", nil); r.status != http.StatusNoContent {
		t.Fatalf("remove: %d %s", r.status, r.body)
	}
	e.call(t, "DELETE", "/v1/push/subscriptions/"+dev.ID, "alice", nil).wantError(t, http.StatusNotFound, api.CodeNotFound, "")
}

func TestPushActionVotesOnceAsItsPersonOverTheArgumentsShown(t *testing.T) {
	e, acts, _ := setupPush(t)
	id := e.pendingApproval(t, "run-push", "payments.send")
	var rec recordAnswer
	e.call(t, "GET", "/v1/approvals/"+id, "alice", nil).decode(t, &rec)
	sha := rec.Record.Request.ToolCall.ArgumentsSHA256
	sign := func(who, decision, sha string, exp time.Time) string {
		tok, err := acts.Sign(push.Action{EventID: id, Approver: who, Decision: decision, ArgumentsSHA256: sha, Expires: exp})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	later := time.Now().Add(time.Hour)
	post := func(tok string) response {
		return e.call(t, "POST", "/v1/push/actions", "", map[string]string{"token": tok})
	}

	post(sign("alice", contracts.DecisionApprove, sha, time.Now().Add(-time.Second))).wantError(t, http.StatusForbidden, api.CodeInvalidToken, "token")
	post("v1.k1.e30.AAAA").wantError(t, http.StatusForbidden, api.CodeInvalidToken, "token")
	post(sign("alice", contracts.DecisionApprove, "00"+sha[2:], later)).wantError(t, http.StatusConflict, contracts.ReasonStaleArguments, "")
	post(sign("bob", contracts.DecisionApprove, sha, later)).wantError(t, http.StatusForbidden, contracts.ReasonNotAnApprover, "")

	tok := sign("alice", contracts.DecisionApprove, sha, later)
	for range 2 { // a second tap counts nothing more and answers the same
		r := post(tok)
		if r.status != http.StatusOK {
			t.Fatalf("action: %d %s", r.status, r.body)
		}
	}
	e.call(t, "GET", "/v1/approvals/"+id, "alice", nil).decode(t, &rec)
	if rec.Record.Status != contracts.StatusApproved || len(rec.Record.Votes) != 1 || rec.Record.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaPush}) {
		t.Fatalf("record after the tap: %s, votes %+v", rec.Record.Status, rec.Record.Votes)
	}
}

// An agent's NATS credential cannot write the push bucket, but the server
// publishes its answer to any JetStream request on the reply subject the
// requester names. On a person's key that holds their devices the bucket
// refuses it (a second message on a key is taken only as a roll-up): the
// devices stay theirs, on the inbox and for the notifier. On a key that
// holds nothing yet it is stored, and is no device: the person's first
// subscription replaces it.
func TestJunkTheServerStoredUnderAPersonsPushKeyIsNoDevice(t *testing.T) {
	e, _, _ := setupPush(t)
	ctx := context.Background()
	junk := func(person string) {
		e.srv.StoreAnswerOn(embedded.RoleOrchestrator, contracts.BucketPush, contracts.PushKey(person))
	}
	ps := pushtest.New()
	defer ps.Close()
	subscribe := func(who, name string) pushtest.Subscription {
		t.Helper()
		sub := ps.Subscribe()
		r := e.call(t, "POST", "/v1/push/subscriptions", who, map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256DH, "auth": sub.Auth}, "device_name": name})
		if r.status != http.StatusCreated {
			t.Fatalf("subscribe %s's %s: %d %s", who, name, r.status, r.body)
		}
		return sub
	}
	listed := func(who string) []string {
		t.Helper()
		var list struct {
			Devices []api.PushDevice `json:"devices"`
		}
		r := e.call(t, "GET", "/v1/push/subscriptions", who, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s's devices: %d %s", who, r.status, r.body)
		}
		r.decode(t, &list)
		var names []string
		for _, d := range list.Devices {
			names = append(names, d.Name)
		}
		return names
	}
	store, err := push.OpenStore(ctx, e.srv.JetStreamAs(embedded.RoleNotifier))
	if err != nil {
		t.Fatal(err)
	}
	endpoints := func(who string) []string {
		t.Helper()
		devs, err := store.Devices(ctx, who)
		if err != nil {
			t.Fatalf("the notifier reads %s's devices: %v", who, err)
		}
		var out []string
		for _, d := range devs {
			out = append(out, d.Endpoint)
		}
		return out
	}

	pixel := subscribe("alice", "Pixel")
	kv, err := e.js.KeyValue(ctx, contracts.BucketPush)
	if err != nil {
		t.Fatal(err)
	}
	was, err := kv.Get(ctx, contracts.PushKey("alice"))
	if err != nil {
		t.Fatal(err)
	}
	e.srv.AnswerOn(embedded.RoleOrchestrator, "$KV."+contracts.BucketPush+"."+contracts.PushKey("alice"))
	// A write over the revision from before the answer, queued behind it,
	// fails if it was stored.
	if _, err := events.UpdateKey(ctx, e.js, contracts.BucketPush, was.Key(), was.Value(), was.Revision()); err != nil {
		t.Fatalf("a write over alice's revision before the answer: %v", err)
	}
	if got := listed("alice"); !slices.Equal(got, []string{"Pixel"}) {
		t.Fatalf("alice's devices after the answer: %v, want her Pixel", got)
	}
	if got := endpoints("alice"); !slices.Equal(got, []string{pixel.Endpoint}) {
		t.Fatalf("the notifier's view of alice's devices after the answer: %v", got)
	}
	laptop := subscribe("alice", "Laptop")
	if got := endpoints("alice"); !slices.Equal(got, []string{pixel.Endpoint, laptop.Endpoint}) {
		t.Fatalf("alice's devices after subscribing again: %v", got)
	}

	junk("bob")
	if got := listed("bob"); len(got) != 0 {
		t.Fatalf("bob's devices, junk only: %v", got)
	}
	phone := subscribe("bob", "Phone")
	if got := endpoints("bob"); !slices.Equal(got, []string{phone.Endpoint}) {
		t.Fatalf("bob's devices after subscribing over junk: %v", got)
	}
}
