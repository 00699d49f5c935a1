package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/notifier/push/pushtest"
)

func decode(t *testing.T, plain []byte) push.Message {
	t.Helper()
	var m push.Message
	if err := json.Unmarshal(plain, &m); err != nil {
		t.Fatalf("message is not JSON: %v: %s", err, plain)
	}
	return m
}

var testNow = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

// request is a one-tap request with a sensitive value.
func request() contracts.ApprovalRequested {
	return contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: "evt-push-1", Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: "run-1", Agent: "billing-bot", RequestedBy: "carol", Tenant: "acme"},
		ToolCall: &contracts.ToolCall{ID: "c1", Name: "wire_transfer", Arguments: json.RawMessage(`{"iban":"DE89370400440532013000","amount":900}`), ArgumentsSHA256: strings.Repeat("ab", 32)},
		Risk:     contracts.RiskHigh, Summary: "Pay the supplier invoice",
		Quorum:           contracts.Quorum{Required: 1, Approvers: []string{"alice"}},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
		ExpiresAt:        testNow.Add(2 * time.Hour), CreatedAt: testNow, Sensitive: []string{"/iban"},
	}
}

type fixture struct {
	srv  *pushtest.Server
	devs *memDevices
	ch   *push.Channel
	sub  pushtest.Subscription
	acts *push.Actions
}

func newFixture(t *testing.T, quiet map[string]push.QuietHours) *fixture {
	t.Helper()
	f := &fixture{srv: pushtest.New(), devs: &memDevices{}, acts: newActions(t)}
	t.Cleanup(f.srv.Close)
	f.srv.Now = func() time.Time { return testNow }
	f.sub = f.srv.Subscribe()
	f.devs.add("alice", f.sub.Device("d1", "Pixel"))
	var err error
	f.ch, err = push.New(push.Config{VAPID: newVAPID(t), Devices: f.devs, Actions: f.acts, PublicURL: "https://cs.example.com",
		AllowInsecure: true, Quiet: quiet, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var alice = notifier.Target{Channel: contracts.ChannelPush, Address: "alice", Approver: "alice"}

func TestPushCarriesSignedActionsAndNoSensitiveValue(t *testing.T) {
	f := newFixture(t, nil)
	req := request()
	if _, err := f.ch.Notify(context.Background(), notifier.Requested(req, alice)); err != nil {
		t.Fatal(err)
	}
	got := f.srv.Received()
	if len(got) != 1 {
		t.Fatalf("%d messages, want 1 (refused: %v)", len(got), f.srv.Refused())
	}
	m := got[0]
	if strings.Contains(string(m.Plaintext), "DE89370400440532013000") || strings.Contains(string(m.Plaintext), req.ToolCall.ArgumentsSHA256) {
		t.Fatalf("the push shows a sensitive value or the arguments hash: %s", m.Plaintext)
	}
	if m.VAPID.Aud != f.srv.URL() || m.VAPID.Sub != "mailto:ops@example.com" || m.Urgency != "high" || m.TTL != 7200 || m.Topic == "" {
		t.Fatalf("headers: %+v", m)
	}
	msg := decode(t, m.Plaintext)
	if msg.Tool != "wire_transfer" || msg.Risk != "high" || msg.Agent != "billing-bot" || msg.RequestedBy != "carol" ||
		!msg.ExpiresAt.Equal(req.ExpiresAt) || msg.URL != "https://cs.example.com/approvals/evt-push-1" ||
		msg.ActionURL != "https://cs.example.com/v1/push/actions" || msg.Sensitive == "" {
		t.Fatalf("message: %+v", msg)
	}
	if len(msg.Actions) != 3 || msg.Actions[0].Action != push.ActionApprove || msg.Actions[1].Action != push.ActionReject || msg.Actions[2].Action != push.ActionOpen {
		t.Fatalf("actions: %+v", msg.Actions)
	}
	a, err := f.acts.Verify(msg.Actions[0].Token, testNow)
	if err != nil {
		t.Fatal(err)
	}
	want := push.Action{EventID: req.EventID, Approver: "alice", Decision: contracts.DecisionApprove,
		ArgumentsSHA256: req.ToolCall.ArgumentsSHA256, Expires: req.ExpiresAt, Nonce: a.Nonce}
	if a != want {
		t.Fatalf("action %+v, want %+v", a, want)
	}
	if _, err := f.acts.Verify(msg.Actions[0].Token, req.ExpiresAt); !errors.Is(err, push.ErrTokenExpired) {
		t.Fatalf("at the deadline: %v, want ErrTokenExpired", err)
	}
	// A redelivery carries the same tokens: a tap on either casts one vote id.
	if _, err := f.ch.Notify(context.Background(), notifier.Requested(req, alice)); err != nil {
		t.Fatal(err)
	}
	again := decode(t, f.srv.Received()[1].Plaintext)
	if again.Actions[0].Token != msg.Actions[0].Token {
		t.Fatal("a redelivered notification carries other tokens")
	}
}

func TestPushOffersOnlyOpenWithoutAOneTapDecision(t *testing.T) {
	for name, change := range map[string]func(*contracts.ApprovalRequested){
		"step_up passkey": func(r *contracts.ApprovalRequested) { r.StepUp = contracts.StepUpPasskey },
		"edit only": func(r *contracts.ApprovalRequested) {
			r.AllowedDecisions = []string{contracts.DecisionEdit, contracts.DecisionReject}
		},
		"no reject":        func(r *contracts.ApprovalRequested) { r.AllowedDecisions = []string{contracts.DecisionApprove} },
		"a human question": func(r *contracts.ApprovalRequested) { r.Kind, r.ToolCall = contracts.KindHumanInput, nil },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			req := request()
			change(&req)
			if _, err := f.ch.Notify(context.Background(), notifier.Requested(req, alice)); err != nil {
				t.Fatal(err)
			}
			msg := decode(t, f.srv.Received()[0].Plaintext)
			if len(msg.Actions) != 1 || msg.Actions[0].Action != push.ActionOpen || msg.Actions[0].Token != "" || msg.ActionURL != "" {
				t.Fatalf("actions: %+v", msg.Actions)
			}
		})
	}
}

func TestGoneSubscriptionIsForgottenAndOthersStillDeliver(t *testing.T) {
	f := newFixture(t, nil)
	second := f.srv.Subscribe()
	f.devs.add("alice", second.Device("d2", "Laptop"))
	f.srv.Gone(f.sub.ID)
	rc, err := f.ch.Notify(context.Background(), notifier.Requested(request(), alice))
	if err != nil || rc.Ref != "d2" {
		t.Fatalf("ref %q, err %v; want d2 delivered", rc.Ref, err)
	}
	left, _ := f.devs.Devices(context.Background(), "alice")
	if len(left) != 1 || left[0].ID != "d2" {
		t.Fatalf("devices left: %+v", left)
	}
	f.srv.Gone(second.ID)
	if _, err := f.ch.Notify(context.Background(), notifier.Reminder(request(), alice, 1)); !errors.Is(err, notifier.ErrPermanent) {
		t.Fatalf("every device gone: %v, want permanent", err)
	}
}

func TestPushServiceAnswers(t *testing.T) {
	for _, c := range []struct {
		code      int
		permanent bool
		after     time.Duration
	}{{http.StatusTooManyRequests, false, 0}, {http.StatusServiceUnavailable, false, 0}, {http.StatusBadRequest, true, 0},
		{http.StatusRequestEntityTooLarge, true, 0}, {http.StatusUnauthorized, true, 0}} {
		f := newFixture(t, nil)
		f.srv.Answer(f.sub.ID, c.code)
		_, err := f.ch.Notify(context.Background(), notifier.Requested(request(), alice))
		if err == nil || errors.Is(err, notifier.ErrPermanent) != c.permanent {
			t.Errorf("%d: err %v, want permanent=%v", c.code, err, c.permanent)
		}
	}
}

// In quiet hours a push is held until they end (not failed: the notifier
// sends it then if the request still waits); a critical one is sent.
func TestQuietHoursHoldAllButCriticalPushes(t *testing.T) {
	q, err := push.ParseQuietHours("05:00-07:30")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, map[string]push.QuietHours{"alice": q})
	_, err = f.ch.Notify(context.Background(), notifier.Requested(request(), alice))
	if until, held := notifier.HeldUntilOf(err); !held || errors.Is(err, notifier.ErrPermanent) || !until.Equal(time.Date(2026, 11, 24, 7, 30, 0, 0, time.UTC)) {
		t.Fatalf("a high-risk push in quiet hours: %v, want held until 07:30 (not failed)", err)
	}
	crit := request()
	crit.Risk = contracts.RiskCritical
	if _, err := f.ch.Notify(context.Background(), notifier.Requested(crit, alice)); err != nil {
		t.Fatalf("a critical push in quiet hours: %v", err)
	}
	if n := len(f.srv.Received()); n != 1 {
		t.Fatalf("%d pushes, want the critical one", n)
	}
}

func TestQuietHoursWindows(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	q, err := push.ParseQuietHours("22:00-07:00 Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at    time.Time
		on    bool
		until time.Time
	}{
		{time.Date(2026, 11, 24, 23, 0, 0, 0, berlin), true, time.Date(2026, 11, 25, 7, 0, 0, 0, berlin)},
		{time.Date(2026, 11, 24, 6, 59, 0, 0, berlin), true, time.Date(2026, 11, 24, 7, 0, 0, 0, berlin)},
		{time.Date(2026, 11, 24, 7, 0, 0, 0, berlin), false, time.Time{}},
		{time.Date(2026, 11, 24, 21, 59, 0, 0, berlin), false, time.Time{}},
	} {
		on, until := q.Active(c.at.UTC())
		if on != c.on || !until.Equal(c.until) {
			t.Errorf("%s: %v until %s, want %v until %s", c.at, on, until, c.on, c.until)
		}
	}
	for _, bad := range []string{"", "22:00", "25:00-07:00", "22:00-22:00", "22:00-07:00 Mars/Base", "9:5-10:00"} {
		if _, err := push.ParseQuietHours(bad); err == nil {
			t.Errorf("ParseQuietHours(%q) accepted", bad)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	for _, c := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"https://fcm.googleapis.com/fcm/send/abc", false, true},
		{"http://fcm.googleapis.com/fcm/send/abc", true, false},
		{"http://127.0.0.1:8080/push/x", false, false},
		{"http://127.0.0.1:8080/push/x", true, true},
		{"http://localhost/push/x", true, true},
		{"http://[::1]:9/push/x", true, true},
		{"http://10.0.0.1/push/x", true, false},
		{"https://user:pw@push.example/x", false, false},
		{"ftp://push.example/x", false, false},
		{"/relative", false, false},
		{"https://push.example/" + strings.Repeat("a", push.MaxEndpointLen), false, false},
	} {
		if err := push.CheckEndpoint(c.url, c.insecure); (err == nil) != c.ok {
			t.Errorf("CheckEndpoint(%q, %v) = %v, want ok=%v", c.url, c.insecure, err, c.ok)
		}
	}
}

func TestActionTokensRefuseTampering(t *testing.T) {
	a := newActions(t)
	tok, err := a.Sign(push.Action{EventID: "e1", Approver: "alice", Decision: contracts.DecisionApprove, ArgumentsSHA256: "aa", Expires: testNow.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	forged := parts[0] + "." + parts[1] + "." + b64s([]byte(`{"evt":"e1","sub":"mallory","dec":"approve","sha":"aa","exp":1900000000,"jti":"x"}`)) + "." + parts[3]
	other, _ := push.NewActions([]push.Key{{ID: "k2", Secret: linkSecret}})
	for name, c := range map[string]struct {
		acts *push.Actions
		tok  string
		want error
	}{
		"forged claims":  {a, forged, push.ErrBadSignature},
		"unknown key":    {other, tok, push.ErrUnknownKey},
		"not a token":    {a, "v1.k1.x", push.ErrTokenMalformed},
		"an email token": {a, "v1.k1." + parts[2] + "." + b64s(make([]byte, 32)), push.ErrBadSignature},
	} {
		if _, err := c.acts.Verify(c.tok, testNow); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if _, err := a.Sign(push.Action{EventID: "e1", Approver: "alice", Decision: contracts.DecisionEdit, ArgumentsSHA256: "aa", Expires: testNow}); err == nil {
		t.Error("an edit action was signed")
	}
	c, _ := a.Verify(tok, testNow)
	if push.VoteID(c) != push.VoteID(c) || push.VoteID(c) == "" {
		t.Error("VoteID is not stable")
	}
}

// recordedAction is a token minted by an earlier version of Actions, with
// the test key and the action below: notifications already on phones must
// keep verifying, and an action signed now must be the same bytes.
const recordedAction = "v1.k1.eyJldnQiOiIwMTkwZDFhMi03YjNjLTdkZWYtODEyMy00NTY3ODlhYmNkZWYiLCJzdWIiOiJhbGljZSIsImRlYyI6ImFwcHJvdmUiLCJzaGEiOiI5Zjg2ZDA4MTg4NGM3ZDY1OWEyZmVhYTBjNTVhZDAxNWEzYmY0ZjFiMmIwYjgyMmNkMTVkNmMxNWIwZjAwYTA4IiwiZXhwIjoxNzgyOTAzNjAwLCJqdGkiOiJyZWNvcmRlZC1ub25jZSJ9.sBrEXsu221rvc7jBf0r1px8DwZjkezGvGVisMwXaKQw"

func TestRecordedActionStillVerifies(t *testing.T) {
	a := newActions(t)
	exp := time.Date(2026, 7, 1, 11, 0, 0, 0, time.UTC)
	want := push.Action{EventID: "0190d1a2-7b3c-7def-8123-456789abcdef", Approver: "alice", Decision: contracts.DecisionApprove,
		ArgumentsSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Expires: exp, Nonce: "recorded-nonce"}
	got, err := a.Verify(recordedAction, exp.Add(-time.Hour))
	if err != nil || got != want {
		t.Fatalf("Verify(recorded action) = %+v, %v, want %+v", got, err, want)
	}
	if tok, err := a.Sign(want); err != nil || tok != recordedAction {
		t.Errorf("Sign = %q, %v, want the recorded bytes %q", tok, err, recordedAction)
	}
}

func TestVAPIDIsCheckedAsAPushServiceDoes(t *testing.T) {
	v := newVAPID(t)
	h, err := v.Authorization("https://push.example.net/send/abc?x=1", testNow, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := push.VerifyAuthorization(h, "https://push.example.net", testNow)
	if err != nil || k != v.PublicKey() || c.Exp != testNow.Add(time.Hour).Unix() {
		t.Fatalf("claims %+v, k %s, err %v", c, k, err)
	}
	if _, _, err := push.VerifyAuthorization(h, "https://other.example", testNow); err == nil {
		t.Error("another origin verified")
	}
	if _, _, err := push.VerifyAuthorization(h, "https://push.example.net", testNow.Add(2*time.Hour)); err == nil {
		t.Error("an expired token verified")
	}
	long, _ := v.Authorization("https://push.example.net/x", testNow, 48*time.Hour) // capped to 12 h
	if c, _, err := push.VerifyAuthorization(long, "https://push.example.net", testNow); err != nil || c.Exp != testNow.Add(12*time.Hour).Unix() {
		t.Errorf("a ttl over 24 h: exp %d, err %v", c.Exp, err)
	}
	other := newVAPID(t)
	swapped := strings.Replace(h, "k="+v.PublicKey(), "k="+other.PublicKey(), 1)
	if _, _, err := push.VerifyAuthorization(swapped, "https://push.example.net", testNow); err == nil {
		t.Error("a token verified under another key")
	}
	if _, err := push.NewVAPID(v.PrivateKey(), "ops@example.com"); err == nil {
		t.Error("a subject without mailto: or https: was accepted")
	}
	again, err := push.NewVAPID(v.PrivateKey(), "https://example.com/contact")
	if err != nil || again.PublicKey() != v.PublicKey() {
		t.Fatalf("the private key does not read back: %v", err)
	}
}

// A person's own quiet hours (QuietOf, a live directory's) win over the
// configured ones; where it answers none, the configured ones count.
func TestAPersonsOwnQuietHoursWin(t *testing.T) {
	f := newFixture(t, map[string]push.QuietHours{"alice": {From: 12 * 60, To: 13 * 60}}) // not quiet at 06:00
	f.devs.add("bob", f.sub.Device("d2", "iPhone"))
	own := map[string]push.QuietHours{"alice": {From: 5 * 60, To: 7 * 60}} // quiet at 06:00
	var err error
	f.ch, err = push.New(push.Config{VAPID: newVAPID(t), Devices: f.devs, Actions: f.acts, PublicURL: "https://cs.example.com",
		AllowInsecure: true, Quiet: map[string]push.QuietHours{"bob": {From: 5 * 60, To: 7 * 60}},
		QuietOf: func(p string) (push.QuietHours, bool) { q, ok := own[p]; return q, ok },
		Now:     func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"alice", "bob"} {
		target := notifier.Target{Channel: contracts.ChannelPush, Address: who, Approver: who}
		if _, err := f.ch.Notify(context.Background(), notifier.Requested(request(), target)); err == nil {
			t.Errorf("%s's push was sent in their quiet hours", who)
		} else if _, held := notifier.HeldUntilOf(err); !held {
			t.Errorf("%s: %v, want held", who, err)
		}
	}
	delete(own, "alice")
	f.ch, _ = push.New(push.Config{VAPID: newVAPID(t), Devices: f.devs, Actions: f.acts, PublicURL: "https://cs.example.com",
		AllowInsecure: true, Quiet: map[string]push.QuietHours{"alice": {From: 12 * 60, To: 13 * 60}},
		QuietOf: func(p string) (push.QuietHours, bool) { q, ok := own[p]; return q, ok },
		Now:     func() time.Time { return testNow }})
	if _, err := f.ch.Notify(context.Background(), notifier.Requested(request(), alice)); err != nil {
		t.Errorf("alice without hours of her own, outside the configured ones: %v", err)
	}
}

// A delivery is recorded on the devices that took it, at most once an
// hour each: a person sees when a device last got a notification, and a
// busy approver's pushes do not each rewrite their subscriptions.
func TestDeliveryIsRecordedOnTheDevicesThatTookItAtMostHourly(t *testing.T) {
	f := newFixture(t, nil)
	second := f.srv.Subscribe()
	f.devs.add("alice", second.Device("d2", "Laptop"))
	now := testNow
	ch, err := push.New(push.Config{VAPID: newVAPID(t), Devices: f.devs, Actions: f.acts, PublicURL: "https://cs.example.com",
		AllowInsecure: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Gone(second.ID)
	lastOf := func() map[string]time.Time {
		devs, _ := f.devs.Devices(context.Background(), "alice")
		out := map[string]time.Time{}
		for _, d := range devs {
			out[d.ID] = d.LastDeliveredAt
		}
		return out
	}
	if _, err := ch.Notify(context.Background(), notifier.Requested(request(), alice)); err != nil {
		t.Fatal(err)
	}
	if got := lastOf(); !got["d1"].Equal(testNow) || len(got) != 1 || f.devs.writes != 1 {
		t.Fatalf("after one push: last delivered %v in %d writes; want d1 at %v (d2 gone) in 1", got, f.devs.writes, testNow)
	}
	now = testNow.Add(contracts.PushDeliveredEvery - time.Minute)
	if _, err := ch.Notify(context.Background(), notifier.Reminder(request(), alice, 1)); err != nil {
		t.Fatal(err)
	}
	if got := lastOf(); !got["d1"].Equal(testNow) || f.devs.writes != 1 {
		t.Fatalf("within the hour: last delivered %v in %d writes; want it kept, no write", got, f.devs.writes)
	}
	now = testNow.Add(contracts.PushDeliveredEvery)
	if _, err := ch.Notify(context.Background(), notifier.Reminder(request(), alice, 2)); err != nil {
		t.Fatal(err)
	}
	if got := lastOf(); !got["d1"].Equal(now) || f.devs.writes != 2 {
		t.Fatalf("an hour on: last delivered %v in %d writes; want %v in 2", got, f.devs.writes, now)
	}
	f.srv.Gone(f.sub.ID)
	now = now.Add(2 * contracts.PushDeliveredEvery)
	if _, err := ch.Notify(context.Background(), notifier.Reminder(request(), alice, 3)); !errors.Is(err, notifier.ErrPermanent) {
		t.Fatalf("no device took it: %v, want permanent", err)
	}
	if f.devs.writes != 2 {
		t.Fatalf("a push no device took was recorded (%d writes)", f.devs.writes)
	}
}
