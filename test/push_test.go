package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/notifier/push/pushtest"
)

// pushPolicy routes payments to the push devices of alice, their one
// approver; the IBAN is sensitive.
const pushPolicy = `version: "push-e2e-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
    approvers: [alice]
    channels: [push]
    sensitive: [/iban]
    summary: "Pay {{args.amount}} {{args.currency}} to {{args.recipient}}"
`

// pushIBAN is the sensitive argument value no push may carry.
const pushIBAN = "DE44500105175407324931"

// newPushRig starts serve with notify.push (the VAPID key generated into
// the data directory, loopback endpoints allowed) and a directory of alice
// (approver) and dave (agent).
func newPushRig(t *testing.T) *quorumRig {
	t.Helper()
	return newPushRigOf(t, pushPolicy, []pushUser{{"alice", "[approver]", ""}, {"dave", "[agent]", ""}})
}

// pushUser is a directory user of a push rig: its roles and, when set,
// its tenants (a YAML list).
type pushUser struct{ id, roles, tenants string }

// newPushRigOf starts serve with notify.push, the policy pol and a
// directory of users.
func newPushRigOf(t *testing.T, pol string, users []pushUser) *quorumRig {
	t.Helper()
	r := &quorumRig{t: t, tokens: map[string]string{}}
	var b strings.Builder
	b.WriteString("users:\n")
	for _, u := range users {
		raw := make([]byte, 24)
		_, _ = rand.Read(raw)
		tok := "cs_" + hex.EncodeToString(raw)
		sum := sha256.Sum256([]byte(tok))
		r.tokens[u.id] = tok
		fmt.Fprintf(&b, "  - id: %s\n    tokens: [{name: %s, sha256: %s, roles: %s}]\n", u.id, u.id, hex.EncodeToString(sum[:]), u.roles)
		if u.tenants != "" {
			fmt.Fprintf(&b, "    tenants: %s\n", u.tenants)
		}
	}
	cfg := `notify:
  push:
    subject: mailto:ops@example.com
    allow_insecure_endpoints: true
  retry: {attempts: 5, initial: 50ms, max: 200ms}
`
	dir := t.TempDir()
	dirFile, polFile, cfgFile := filepath.Join(dir, "directory.yaml"), filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "countersign.yaml")
	for path, data := range map[string]string{dirFile: b.String(), polFile: pol, cfgFile: cfg} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("COUNTERSIGN_VAPID_PRIVATE_KEY", "")
	r.p = startServe(t, t.TempDir(), "--config", cfgFile, "--directory", dirFile, "--policy", polFile)
	return r
}

// nextPush waits for the push service's next message of kind for eventID
// and decodes it.
func nextPush(t *testing.T, srv *pushtest.Server, eventID, kind string) (pushtest.Message, push.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		m, err := srv.Next(ctx)
		if err != nil {
			t.Fatalf("no %s push for %s: %v (refused: %v)", kind, eventID, err, srv.Refused())
		}
		var msg push.Message
		if err := json.Unmarshal(m.Plaintext, &msg); err != nil {
			t.Fatalf("a push that is not a message: %v\n%s", err, m.Plaintext)
		}
		if strings.Contains(string(m.Plaintext), pushIBAN) {
			t.Fatalf("a push carries the sensitive IBAN:\n%s", m.Plaintext)
		}
		if msg.EventID == eventID && msg.Kind == kind {
			return m, msg
		}
	}
}

// pushActionAnswer is what POST /v1/push/actions answers.
type pushActionAnswer struct {
	Result, Status string
	Error          struct{ Code string }
}

// pushTap posts a notification action's token as the service worker does.
func pushTap(t *testing.T, actionURL, token string) (int, pushActionAnswer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, _ := json.Marshal(map[string]string{"token": token})
	req, err := http.NewRequestWithContext(ctx, "POST", actionURL, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans pushActionAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatalf("POST %s: %d, not JSON: %v", actionURL, resp.StatusCode, err)
	}
	return resp.StatusCode, ans
}

// TestPushApprovesFromTheNotification: serve with notify.push delivers a
// new request to the device alice subscribed through the API, encrypted
// for it and signed with serve's VAPID key; the message names the tool,
// never the sensitive IBAN, and carries Approve and Reject; the Approve
// token posted to /v1/push/actions (no bearer token) decides the request
// as alice via push, once; the outcome is pushed too.
func TestPushApprovesFromTheNotification(t *testing.T) {
	srv := pushtest.New()
	defer srv.Close()
	r := newPushRig(t)
	var key struct {
		PublicKey string `json:"public_key"`
	}
	if code := r.must(r.tokens["alice"], "GET", "/v1/push/key", nil, &key); code != http.StatusOK || key.PublicKey == "" {
		t.Fatalf("GET /v1/push/key: %d %+v", code, key)
	}
	sub := srv.Subscribe()
	body := map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256DH, "auth": sub.Auth}, "device_name": "Alice's phone"}
	if code := r.must(r.tokens["alice"], "POST", "/v1/push/subscriptions", body, nil); code != http.StatusCreated {
		t.Fatalf("POST /v1/push/subscriptions: %d", code)
	}

	review := map[string]any{
		"run": map[string]any{"id": "run-push", "agent": "billing-bot"},
		"tool_calls": []map[string]any{{"id": "pay", "name": "payments.send",
			"arguments": map[string]any{"amount": 1250, "currency": "EUR", "recipient": "Globex GmbH", "iban": pushIBAN}}},
	}
	var ans reviewAnswer
	if code := r.must(r.tokens["dave"], "POST", "/v1/reviews", review, &ans); code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review: %d %+v", code, ans)
	}
	id := ans.Results[0].EventID

	m, msg := nextPush(t, srv, id, "requested")
	if m.VAPIDKey != key.PublicKey || m.VAPID.Sub != "mailto:ops@example.com" || m.Urgency != "high" || m.TTL <= 0 {
		t.Errorf("push headers: VAPID k %s sub %s, Urgency %q, TTL %d; want k %s", m.VAPIDKey, m.VAPID.Sub, m.Urgency, m.TTL, key.PublicKey)
	}
	tokens := map[string]string{}
	for _, a := range msg.Actions {
		tokens[a.Action] = a.Token
	}
	if msg.Tool != "payments.send" || msg.Summary != "Pay 1250 EUR to Globex GmbH" || msg.Sensitive == "" ||
		tokens[push.ActionApprove] == "" || tokens[push.ActionReject] == "" || msg.ActionURL != r.p.url+push.ActionPath {
		t.Fatalf("the request's push (action URL want %s): %s", r.p.url+push.ActionPath, m.Plaintext)
	}

	// The service worker posts the token as it is, with no bearer token.
	for tap := range 2 {
		code, res := pushTap(t, msg.ActionURL, tokens[push.ActionApprove])
		if tap == 0 && (code != http.StatusOK || res.Result != "counted" || res.Status != contracts.StatusApproved) {
			t.Fatalf("Approve: %d %+v", code, res)
		}
		if tap == 1 && code >= 500 {
			t.Fatalf("a second tap: %d %+v", code, res)
		}
	}
	rec := r.record(id)
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaPush}) {
		t.Fatalf("record after the Approve tap: %s %+v", rec.Status, rec.Votes)
	}
	if code, res := pushTap(t, msg.ActionURL, tokens[push.ActionReject]); code < 400 || code >= 500 {
		t.Errorf("Reject after the approval: %d %+v, want a refusal", code, res)
	}

	_, decided := nextPush(t, srv, id, "decided")
	if !strings.Contains(decided.Outcome, "alice") || len(decided.Actions) != 1 || decided.Actions[0].Token != "" {
		t.Errorf("the outcome's push: %+v", decided)
	}
}

// tenantPushPolicy names alice (of acme) and erin (of globex) as the
// approvers of every payment.
const tenantPushPolicy = `version: "push-tenants-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, erin]
    channels: [push]
    sensitive: [/iban]
`

// TestPushReachesOnlyThoseWhoMayRead: a request of tenant acme is pushed to
// alice's device (acme) and never to erin's (globex), although the rule
// names both: a person is told only of requests they may read. Neither the
// request's push nor the outcome's carries the sensitive IBAN.
func TestPushReachesOnlyThoseWhoMayRead(t *testing.T) {
	srv := pushtest.New()
	defer srv.Close()
	r := newPushRigOf(t, tenantPushPolicy, []pushUser{
		{"alice", "[approver]", "[acme]"}, {"erin", "[approver]", "[globex]"}, {"dave", "[agent]", "[acme]"},
	})
	subs := map[string]pushtest.Subscription{}
	for _, who := range []string{"alice", "erin"} {
		sub := srv.Subscribe()
		subs[who] = sub
		body := map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256DH, "auth": sub.Auth}, "device_name": who + "'s phone"}
		if code := r.must(r.tokens[who], "POST", "/v1/push/subscriptions", body, nil); code != http.StatusCreated {
			t.Fatalf("%s subscribes: %d", who, code)
		}
	}
	review := map[string]any{
		"run": map[string]any{"id": "run-push-tenants", "agent": "billing-bot", "tenant": "acme"},
		"tool_calls": []map[string]any{{"id": "pay", "name": "payments.send",
			"arguments": map[string]any{"amount": 90, "currency": "EUR", "recipient": "Initech", "iban": pushIBAN}}},
	}
	var ans reviewAnswer
	if code := r.must(r.tokens["dave"], "POST", "/v1/reviews", review, &ans); code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review: %d %+v", code, ans)
	}
	id := ans.Results[0].EventID
	m, msg := nextPush(t, srv, id, "requested")
	if m.Subscription != subs["alice"].ID {
		t.Fatalf("the request was pushed to %s, not to alice's device", m.Subscription)
	}
	var approve string
	for _, a := range msg.Actions {
		if a.Action == push.ActionApprove {
			approve = a.Token
		}
	}
	if code, res := pushTap(t, msg.ActionURL, approve); code != http.StatusOK || res.Status != contracts.StatusApproved {
		t.Fatalf("alice's Approve: %d %+v", code, res)
	}
	// The outcome is pushed after the request was, to alice alone: by then
	// every push of the request has been sent.
	if m, _ := nextPush(t, srv, id, "decided"); m.Subscription != subs["alice"].ID {
		t.Fatalf("the outcome was pushed to %s, not to alice's device", m.Subscription)
	}
	for _, got := range srv.Received() {
		if got.Subscription == subs["erin"].ID {
			t.Fatalf("erin, of another tenant, was pushed:\n%s", got.Plaintext)
		}
	}
}
