package test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email"
	"github.com/countersign/countersign/notifier/email/smtptest"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

// The tenant rule on every outgoing path, against a real serve: one policy
// serves acme and globex, and its rule names the finance group, which has
// an approver of each. An acme request reaches acme's approver by Slack,
// email and acme's webhook; globex's approver gets nothing on any channel,
// and an email link made out to her for the request shows exactly what a
// link to a request that does not exist shows. A flood of acme requests
// gets acme's approver at most the fan-out cap on each channel and one
// message saying more wait in the inbox.

const tenantPolicy = `version: "tenants-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
    approvers: ["group:finance"]
    quorum: 1
    channels: ["slack", "email", "webhook"]
    summary: "Pay {{args.amount}} {{args.currency}} to {{args.recipient}}"
`

const (
	acmeSlack   = "U0ACMEALICE"
	globexSlack = "U0GLOBEXGINA"
	tenantCap   = 2
)

type tenantRig struct {
	*quorumRig
	slack  *slacktest.Server
	smtp   *smtptest.Server
	acme   *hookReceiver // webhook endpoint scoped to acme
	legacy *hookReceiver // webhook endpoint without tenants
	links  *email.Links
	users  map[string]embedded.User
}

func newTenantRig(t *testing.T) *tenantRig {
	t.Helper()
	r := &tenantRig{quorumRig: &quorumRig{t: t, tokens: map[string]string{}}}
	r.slack = slacktest.New(t, slackBotToken)
	r.slack.AddUser(acmeSlack)
	r.slack.AddUser(globexSlack)
	r.smtp = smtptest.Start(t)
	r.acme, r.legacy = newHookReceiver(t, 0), newHookReceiver(t, 0)

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	linkKey := "e2e:" + base64.StdEncoding.EncodeToString(secret)
	key, err := email.ParseKey(linkKey)
	if err != nil {
		t.Fatal(err)
	}
	if r.links, err = email.NewLinks([]email.Key{key}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("groups:\n  finance: {description: payments}\nusers:\n")
	for _, u := range []struct{ id, tenants, slack, roles string }{
		{"alice", "[acme]", acmeSlack, "[approver]"},
		{"gina", "[globex]", globexSlack, "[approver]"},
		{"dave", "[acme]", "", "[agent]"},
	} {
		raw := make([]byte, 24)
		_, _ = rand.Read(raw)
		tok := "cs_" + hex.EncodeToString(raw)
		sum := sha256.Sum256([]byte(tok))
		r.tokens[u.id] = tok
		fmt.Fprintf(&b, "  - id: %s\n    tenants: %s\n", u.id, u.tenants)
		if u.slack != "" {
			fmt.Fprintf(&b, "    email: %s@example.com\n    slack_user_id: %s\n    groups: [finance]\n", u.id, u.slack)
		}
		fmt.Fprintf(&b, "    tokens: [{name: %s, sha256: %s, roles: %s}]\n", u.id, hex.EncodeToString(sum[:]), u.roles)
	}
	host, port := r.smtp.Addr()
	cfg := fmt.Sprintf(`notify:
  slack:
    bot_token: env:E2E_SLACK_BOT_TOKEN
    signing_secret: env:E2E_SLACK_SIGNING_SECRET
    api_url: %s
  email:
    from: "Countersign <approvals@example.com>"
    host: %s
    port: %d
    tls: none
    link_keys: [env:E2E_LINK_KEY]
  webhooks:
    - name: acme-audit
      url: %s/acme
      secrets: [env:E2E_ACME_SECRET]
      tenants: [acme]
    - name: legacy
      url: %s/legacy
      secrets: [env:E2E_LEGACY_SECRET]
  fanout: {max_messages: %d, window: 1h}
  retry: {attempts: 5, initial: 50ms, max: 200ms}
`, r.slack.URL(), host, port, r.acme.srv.URL, r.legacy.srv.URL, tenantCap)
	dirFile, polFile, cfgFile := filepath.Join(dir, "directory.yaml"), filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "countersign.yaml")
	for path, data := range map[string]string{dirFile: b.String(), polFile: tenantPolicy, cfgFile: cfg} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("E2E_SLACK_BOT_TOKEN", slackBotToken)
	t.Setenv("E2E_SLACK_SIGNING_SECRET", slackSigning)
	t.Setenv("E2E_LINK_KEY", linkKey)
	t.Setenv("E2E_ACME_SECRET", r.acme.secret)
	t.Setenv("E2E_LEGACY_SECRET", r.legacy.secret)
	data := t.TempDir()
	r.p = startServe(t, data, "--config", cfgFile, "--directory", dirFile, "--policy", polFile)
	r.users = roleUsers(t, data)
	waitDirectory(t, r.p, func(d contracts.Directory) bool { return len(d.People) >= 3 })
	return r
}

// submit opens one acme payment request as dave's agent and returns its id.
func (r *tenantRig) submit(runID string) string {
	r.t.Helper()
	body := map[string]any{
		"run": map[string]any{"id": runID, "agent": "billing-bot", "requested_by": "dave", "tenant": "acme"},
		"tool_calls": []map[string]any{{"id": "pay", "name": "payments.send",
			"arguments": map[string]any{"amount": 1250, "currency": "EUR", "recipient": "Initech Ltd"}}},
	}
	var ans reviewAnswer
	if code := r.must(r.tokens["dave"], "POST", "/v1/reviews", body, &ans); code != 200 || len(ans.Results) != 1 || ans.Results[0].EventID == "" {
		r.t.Fatalf("review: %d %+v", code, ans)
	}
	return ans.Results[0].EventID
}

// receipts waits for n delivery receipts of eventID, read from the bus as
// the API role (which follows HITL_EVENTS) with an ordered consumer.
func (r *tenantRig) receipts(eventID string, n int) []notifier.Receipt {
	r.t.Helper()
	var url struct {
		URL string `json:"url"`
	}
	raw, err := os.ReadFile(filepath.Join(r.p.data, "resolver.json"))
	if err != nil {
		r.t.Fatal(err)
	}
	_ = json.Unmarshal(raw, &url)
	u := r.users[string(embedded.RoleAPI)]
	// The API role may not delete consumers: the ordered consumer is left
	// to expire, and the client's complaint about it is not the test's.
	nc, err := nats.Connect(url.URL, nats.UserInfo(u.Name, u.Password), embedded.InboxOptionFor(u.Name), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		r.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{notifier.ReceiptSubject("*", eventID)}})
	if err != nil {
		r.t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []notifier.Receipt
	for len(out) < n {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			r.t.Fatalf("%d of %d receipts of %s: %v (%+v)", len(out), n, eventID, err, out)
		}
		var rc notifier.Receipt
		if err := json.Unmarshal(m.Data(), &rc); err != nil {
			r.t.Fatal(err)
		}
		if k := rc.IdempotencyKey + rc.Status; !seen[k] {
			seen[k] = true
			out = append(out, rc)
		}
	}
	return out
}

// slackTo is the messages in the direct conversation with user.
func (r *tenantRig) slackTo(user string) []slacktest.Message {
	im := "D" + strings.TrimPrefix(user, "U")
	var out []slacktest.Message
	for _, m := range r.slack.Messages() {
		if m.Channel == im {
			out = append(out, m)
		}
	}
	return out
}

// mailsTo is the emails to addr.
func (r *tenantRig) mailsTo(addr string) []smtptest.Content {
	var out []smtptest.Content
	for _, m := range r.smtp.Messages() {
		if len(m.To) == 1 && m.To[0] == addr {
			c, err := m.Content()
			if err != nil {
				r.t.Fatal(err)
			}
			out = append(out, c)
		}
	}
	return out
}

func (h *hookReceiver) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.requests)
}

func get(t *testing.T, link string) (int, string) {
	t.Helper()
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestNotificationsKeepTenantsApart(t *testing.T) {
	r := newTenantRig(t)
	id := r.submit("run-acme-1")
	// Every route's receipt: alice on Slack and by email, the routes'
	// refusals of gina, acme's webhook endpoint.
	byKey := map[string]notifier.Receipt{}
	for _, rc := range r.receipts(id, 5) {
		byKey[rc.Channel+" "+rc.Target] = rc
	}
	for _, k := range []string{"slack " + acmeSlack, "email alice@example.com", "webhook acme-audit"} {
		if byKey[k].Status != notifier.ReceiptDelivered {
			t.Errorf("%s: %+v, want delivered (receipts %+v)", k, byKey[k], byKey)
		}
	}
	for _, route := range []string{"slack", "email"} {
		rc := byKey[route+" "+route]
		if rc.Status != notifier.ReceiptFailed || !strings.Contains(rc.Error, "gina may not read requests of this tenant") || strings.Contains(rc.Error, "globex") {
			t.Errorf("route %s: %+v, want a refusal of gina that does not name her tenant", route, rc)
		}
	}
	if n := len(r.slackTo(globexSlack)); n != 0 {
		t.Errorf("globex's approver got %d Slack messages about an acme request", n)
	}
	if n := len(r.mailsTo("gina@example.com")); n != 0 {
		t.Errorf("globex's approver got %d emails about an acme request", n)
	}
	if n := len(r.slackTo(acmeSlack)); n != 1 {
		t.Errorf("acme's approver got %d Slack messages, want 1", n)
	}
	if n := len(r.mailsTo("alice@example.com")); n != 1 {
		t.Errorf("acme's approver got %d emails, want 1", n)
	}
	if r.legacy.count() != 0 {
		t.Errorf("the webhook endpoint without tenants got %d deliveries of an acme request", r.legacy.count())
	}

	// A link made out to gina for the acme request shows what a link to a
	// request that does not exist shows.
	sign := func(event string) string {
		tok, err := r.links.Sign(email.Claims{EventID: event, Approver: "gina", Expires: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return r.p.url + "/e/" + tok
	}
	wantStatus, wantBody := get(t, sign(uuid.NewString()))
	status, body := get(t, sign(id))
	if status != http.StatusNotFound || status != wantStatus || body != wantBody {
		t.Errorf("gina's link to the acme request: %d\n%s\nwant as for a missing request: %d\n%s", status, body, wantStatus, wantBody)
	}
	for _, secret := range []string{"billing-bot", "run-acme-1", "dave", "1250", "Initech"} {
		if strings.Contains(body, secret) {
			t.Errorf("gina's page shows %q", secret)
		}
	}
	// The same link made out to alice, who may read it, shows it.
	tok, err := r.links.Sign(email.Claims{EventID: id, Approver: "alice", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := get(t, r.p.url+"/e/"+tok); status != http.StatusOK || !strings.Contains(body, "Initech") {
		t.Errorf("alice's link: %d\n%s", status, body)
	}

	// A flood: with the cap at 2 per hour, two more requests reach alice,
	// then one message says more wait in the inbox, then nothing.
	ids := []string{id}
	for i := range tenantCap + 2 {
		ids = append(ids, r.submit(fmt.Sprintf("run-acme-flood-%d", i)))
	}
	for _, e := range ids[1:] {
		r.receipts(e, 5)
	}
	// Every request has been admitted or held; the summary may still be
	// on its way.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.slack.WaitFor(ctx, func(*slacktest.Server) bool { return len(r.slackTo(acmeSlack)) > tenantCap }); err != nil {
		t.Fatalf("no Slack summary: %v", err)
	}
	for len(r.mailsTo("alice@example.com")) <= tenantCap {
		if _, err := r.smtp.Next(ctx); err != nil {
			t.Fatalf("no email summary: %v", err)
		}
	}
	slackMsgs, mails := r.slackTo(acmeSlack), r.mailsTo("alice@example.com")
	if len(slackMsgs) != tenantCap+1 || len(mails) != tenantCap+1 {
		t.Fatalf("alice got %d Slack messages and %d emails for %d requests, want %d of each (the cap and one summary)",
			len(slackMsgs), len(mails), len(ids), tenantCap+1)
	}
	if last := slackMsgs[len(slackMsgs)-1]; !strings.Contains(last.Text+string(last.Blocks), "More approval requests are waiting") {
		t.Errorf("the last Slack message is not the summary: %s", last.Text)
	}
	held := 0
	for _, m := range mails {
		if strings.Contains(m.Subject, "More approval requests are waiting") {
			held++
			if strings.Contains(m.Text, "Initech") || strings.Contains(m.Text, "/e/") {
				t.Errorf("the summary email shows a request:\n%s", m.Text)
			}
		}
	}
	if held != 1 {
		t.Errorf("%d summary emails, want 1", held)
	}
	if n := len(r.slackTo(globexSlack)) + len(r.mailsTo("gina@example.com")); n != 0 {
		t.Errorf("globex's approver got %d messages during the flood", n)
	}
	resp, err := http.Get(r.p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	heldN := len(ids) - tenantCap
	for _, want := range []string{
		fmt.Sprintf(`countersign_notifications_held_total{channel="slack"} %d`, heldN),
		fmt.Sprintf(`countersign_notifications_held_total{channel="email"} %d`, heldN),
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
