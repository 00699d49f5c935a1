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
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier/email/smtptest"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
	"github.com/countersign/countersign/notifier/webhook"
)

const (
	slackBotToken = "xoxb-countersign-e2e-token"
	slackSigning  = "e2e-signing-secret-0123456789abcdef"
	aliceSlack    = "U0ALICE0001"
	bobSlack      = "U0BOB000001"
)

// notifyPolicy routes payments to Slack, email to every approver and a
// webhook; one approval of alice or bob decides.
const notifyPolicy = `version: "notify-e2e-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
    approvers: [alice, bob, automation]
    quorum: 1
    channels: ["slack:#payments", "email:alice", "email:bob", "webhook:automation"]
    summary: "Pay {{args.amount}} {{args.currency}} to {{args.recipient}}"
`

// hookReceiver is a webhook endpoint that verifies every delivery and can
// be told to fail the first deliveries.
type hookReceiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret string
	key    []byte

	mu        sync.Mutex
	failFirst int
	requests  []hookDelivery
	arrived   chan hookDelivery // successful deliveries
}

type hookDelivery struct {
	id, kind, trace string
	status          int
	body            []byte
}

func newHookReceiver(t *testing.T, failFirst int) *hookReceiver {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	h := &hookReceiver{t: t, secret: "whsec_" + base64.StdEncoding.EncodeToString(raw), key: raw,
		failFirst: failFirst, arrived: make(chan hookDelivery, 100)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([][]byte{h.key}, r.Header, body, time.Now(), 0); err != nil {
			t.Errorf("webhook delivery does not verify: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		d := hookDelivery{id: r.Header.Get("webhook-id"), kind: r.Header.Get("countersign-kind"), body: body, status: http.StatusOK,
			trace: r.Header.Get("traceparent")}
		h.mu.Lock()
		if h.failFirst > 0 {
			h.failFirst--
			d.status = http.StatusServiceUnavailable
		}
		h.requests = append(h.requests, d)
		h.mu.Unlock()
		w.WriteHeader(d.status)
		if d.status < 300 {
			h.arrived <- d
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) next(kind string) hookDelivery {
	h.t.Helper()
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	for {
		select {
		case d := <-h.arrived:
			if d.kind == kind {
				return d
			}
		case <-timer.C:
			h.t.Fatalf("no %s webhook delivery", kind)
		}
	}
}

// notifyRig is a serve process with every channel configured against real
// local peers: the strict Slack fake, an SMTP server and a webhook receiver.
type notifyRig struct {
	*quorumRig
	slack *slacktest.Server
	smtp  *smtptest.Server
	hook  *hookReceiver
}

func newNotifyRig(t *testing.T, hookFailures int, policy ...string) *notifyRig {
	t.Helper()
	r := &notifyRig{quorumRig: &quorumRig{t: t, tokens: map[string]string{}}}
	r.slack = slacktest.New(t, slackBotToken)
	r.slack.AddChannel("C0PAYMENTS1", "payments")
	r.smtp = smtptest.Start(t)
	r.hook = newHookReceiver(t, hookFailures)

	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("users:\n")
	for _, u := range []struct{ id, email, slack, roles string }{
		{"alice", "alice@example.com", aliceSlack, "[approver]"},
		{"bob", "bob@example.com", bobSlack, "[approver]"},
		{"carol", "carol@example.com", "U0CAROL0001", "[approver]"},
		{"automation", "", "", "[approver]"},
		{"dave", "", "", "[agent]"},
	} {
		raw := make([]byte, 24)
		_, _ = rand.Read(raw)
		tok := "cs_" + hex.EncodeToString(raw)
		sum := sha256.Sum256([]byte(tok))
		r.tokens[u.id] = tok
		fmt.Fprintf(&b, "  - id: %s\n", u.id)
		if u.email != "" {
			fmt.Fprintf(&b, "    email: %s\n    slack_user_id: %s\n", u.email, u.slack)
		}
		fmt.Fprintf(&b, "    tokens: [{name: %s, sha256: %s, roles: %s}]\n", u.id, hex.EncodeToString(sum[:]), u.roles)
	}
	dirFile, polFile, cfgFile := filepath.Join(dir, "directory.yaml"), filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "countersign.yaml")
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
  webhooks:
    - name: automation
      url: %s/hooks/countersign
      secrets: [env:E2E_WEBHOOK_SECRET]
  retry: {attempts: 5, initial: 50ms, max: 200ms}
`, r.slack.URL(), host, port, r.hook.srv.URL)
	pol := notifyPolicy
	if len(policy) > 0 {
		pol = policy[0]
	}
	for path, data := range map[string]string{dirFile: b.String(), polFile: pol, cfgFile: cfg} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("E2E_SLACK_BOT_TOKEN", slackBotToken)
	t.Setenv("E2E_SLACK_SIGNING_SECRET", slackSigning)
	t.Setenv("E2E_WEBHOOK_SECRET", r.hook.secret)
	r.p = startServe(t, t.TempDir(), "--config", cfgFile, "--directory", dirFile, "--policy", polFile)
	return r
}

// waitingPayment starts a waiting review of a payment by dave's agent.
func (r *notifyRig) waitingPayment(runID string) <-chan reviewAnswer {
	return r.waitingReview(runID, "dave")
}

// slackMessage waits for a message in #payments about eventID (any when
// eventID is empty) that satisfies cond.
func (r *notifyRig) slackMessage(eventID string, cond func(slacktest.Message) bool) slacktest.Message {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var found slacktest.Message
	err := r.slack.WaitFor(ctx, func(s *slacktest.Server) bool {
		for _, m := range s.Messages() {
			if m.Channel == "C0PAYMENTS1" && strings.Contains(string(m.Blocks), eventID) && cond(m) {
				found = m
				return true
			}
		}
		return false
	})
	if err != nil {
		r.t.Fatalf("no Slack message for %s: %v (calls %v)", eventID, err, r.slack.Calls())
	}
	return found
}

// mailTo waits for the next email to addr whose subject contains subject.
func (r *notifyRig) mailTo(addr, subject string) smtptest.Content {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		m, err := r.smtp.Next(ctx)
		if err != nil {
			r.t.Fatalf("no email to %s about %q: %v", addr, subject, err)
		}
		c, err := m.Content()
		if err != nil {
			r.t.Fatal(err)
		}
		if len(m.To) == 1 && m.To[0] == addr && strings.Contains(c.Subject, subject) {
			return c
		}
	}
}

func TestEmailLinkApprovesAndTheRunResumes(t *testing.T) {
	r := newNotifyRig(t, 0)
	done := r.waitingPayment("run-email")
	mail := r.mailTo("alice@example.com", "Approval needed")
	link := regexp.MustCompile(`https?://[^\s"<>]+/e/[A-Za-z0-9._-]+`).FindString(mail.Text)
	if link == "" {
		t.Fatalf("no personal link in the email:\n%s", mail.Text)
	}
	if !strings.Contains(mail.HTML, link) {
		t.Errorf("the HTML part lacks the link %s", link)
	}
	// Opening the link, as a mail scanner would, decides nothing.
	for i := 0; i < 2; i++ {
		resp, err := http.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(page), "Approve") {
			t.Fatalf("GET %s: %d\n%s", link, resp.StatusCode, page)
		}
		if p := resp.Header.Get("Referrer-Policy"); p != "no-referrer" {
			t.Errorf("Referrer-Policy %q", p)
		}
		h := regexp.MustCompile(`name="h" value="([0-9a-f]{64})"`).FindStringSubmatch(string(page))
		if h == nil {
			t.Fatalf("the page has no arguments hash:\n%s", page)
		}
		if i == 1 {
			id := mail.Header.Get("X-Countersign-Event-Id")
			if rec := r.record(id); rec.Status != contracts.StatusPending || len(rec.Votes)+len(rec.RefusedVotes) != 0 {
				t.Fatalf("opening the link changed the record: %+v", rec)
			}
			// The confirmation's POST votes.
			form := url.Values{"decision": {"approve"}, "h": {h[1]}, "comment": {"looks right"}}
			resp, err := http.PostForm(link, form)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "recorded") {
				t.Fatalf("POST: %d\n%s", resp.StatusCode, body)
			}
			// The same link again does not count twice.
			resp, err = http.PostForm(link, form)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "already") {
				t.Errorf("second POST: %d\n%s", resp.StatusCode, body)
			}
		}
	}
	if v, reason := r.verdict(done); v != "allowed" {
		t.Fatalf("verdict %s (%s), want allowed", v, reason)
	}
	// Bob, who was shown the request, is told the outcome.
	out := r.mailTo("bob@example.com", "Re:")
	if !strings.Contains(out.Text, "Approved by alice via email") {
		t.Errorf("outcome mail:\n%s", out.Text)
	}
	// Every role's consumers report their backlog on /metrics.
	resp, err := http.Get(r.p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, c := range []string{"arbiter-requests", "arbiter-resolutions", "arbiter-timers", "notifier", "notifier-decided", "notifier-changes"} {
		if !strings.Contains(string(metrics), `countersign_consumer_pending{consumer="`+c+`"`) {
			t.Errorf("/metrics has no backlog of consumer %s", c)
		}
	}
	// The audit trail has it all, in order.
	id := mail.Header.Get("X-Countersign-Event-Id")
	text, err := r.cliAs("alice", "audit", id)
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, text)
	}
	want := []string{
		"requested  by billing",
		"policy     rule payments, policy notify-e2e-1, risk high",
		"notified   email requested to alice@example.com (alice): delivered",
		"notified   slack requested to #payments: delivered",
		"notified   webhook requested to automation: delivered",
		"vote       approve by alice via email: looks right",
		"decided    approved by alice",
		"notified   email decided to bob@example.com (bob): delivered",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(text, w)
		if i < 0 {
			t.Errorf("audit lacks %q:\n%s", w, text)
			continue
		}
		if w == "decided    approved by alice" && i < last {
			t.Errorf("audit out of order at %q:\n%s", w, text)
		}
		last = max(last, i)
	}
}

func TestSlackButtonApprovesAndTheMessageShowsTheOutcome(t *testing.T) {
	r := newNotifyRig(t, 0)
	done := r.waitingPayment("run-slack")
	msg := r.slackMessage("", func(m slacktest.Message) bool { return m.HasActions() })
	var id string
	for _, b := range msg.Buttons() {
		if b.ActionID == "countersign_approve" {
			v, err := slack.ParseButtonValue(b.Value)
			if err != nil {
				t.Fatal(err)
			}
			id = v.EventID
		}
	}
	if id == "" {
		t.Fatalf("the Slack message has no Approve button: %v", msg.Buttons())
	}
	req := r.slack.Click(slackSigning, msg, "countersign_approve", bobSlack, time.Now())
	target, _ := url.Parse(r.p.url + "/slack/interactions")
	req.URL, req.Host, req.RequestURI = target, target.Host, ""
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("interaction answered %d", resp.StatusCode)
	}
	if v, reason := r.verdict(done); v != "allowed" {
		t.Fatalf("verdict %s (%s), want allowed", v, reason)
	}
	rec := r.record(id)
	if len(rec.Votes) != 1 || rec.Votes[0].Approver != (contracts.Approver{ID: "bob", Via: contracts.ViaSlack}) {
		t.Fatalf("votes %+v, want bob via slack", rec.Votes)
	}
	// The message in #payments ends without buttons, saying who decided.
	r.slackMessage(id, func(m slacktest.Message) bool {
		return !m.HasActions() && strings.Contains(strings.Join(m.Texts(), " "), "Approved by bob via slack")
	})
	if bad := r.slack.Refused(); len(bad) != 0 {
		t.Errorf("the fake refused calls: %v", bad)
	}
	// A forged click (wrong secret) is refused and decides nothing.
	forged := r.slack.Click("not-the-secret", msg, "countersign_reject", aliceSlack, time.Now())
	forged.URL, forged.Host, forged.RequestURI = target, target.Host, ""
	resp, err = http.DefaultClient.Do(forged)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged interaction answered %d, want 401", resp.StatusCode)
	}
}

func TestWebhookAutomationDecidesAfterTwoFailedDeliveries(t *testing.T) {
	r := newNotifyRig(t, 2)
	// The agent's review carries a trace; it follows the request to the
	// webhook and the outcome back to the same trace.
	const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	done := make(chan reviewAnswer, 1)
	go func() {
		body, _ := json.Marshal(paymentReview("run-hook", "dave"))
		req, _ := http.NewRequest("POST", r.p.url+"/v1/reviews?wait=30s", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+r.tokens["dave"])
		req.Header.Set("traceparent", trace)
		var ans reviewAnswer
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("review: %v", err)
		} else {
			if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
				t.Errorf("review answer: %v", err)
			}
			resp.Body.Close()
		}
		done <- ans
	}()
	d := r.hook.next("requested")
	if !strings.HasPrefix(d.trace, trace[:36]) {
		t.Errorf("requested webhook traceparent %q, want a span of trace %s", d.trace, trace[3:35])
	}
	var req contracts.ApprovalRequested
	if err := json.Unmarshal(d.body, &req); err != nil || req.Spec != contracts.SpecApprovalRequested {
		t.Fatalf("webhook body is not the request event: %v\n%s", err, d.body)
	}
	// The automation checks the call and approves with its own token.
	var rec struct {
		Record contracts.Record `json:"record"`
	}
	body := map[string]any{"decision": "approve", "comment": "within the change window", "arguments_sha256": req.ToolCall.ArgumentsSHA256}
	if code := r.must(r.tokens["automation"], "POST", "/v1/approvals/"+req.EventID+"/votes", body, &rec); code != 200 {
		t.Fatalf("automation vote: %d %+v", code, rec)
	}
	if v, reason := r.verdict(done); v != "allowed" {
		t.Fatalf("verdict %s (%s), want allowed", v, reason)
	}
	decided := r.hook.next("decided")
	if !strings.HasPrefix(decided.trace, trace[:36]) {
		t.Errorf("decided webhook traceparent %q, want a span of the review's trace %s", decided.trace, trace[3:35])
	}
	var ev contracts.Decided
	if err := json.Unmarshal(decided.body, &ev); err != nil || ev.Status != contracts.StatusApproved || ev.EventID != req.EventID {
		t.Fatalf("decided webhook: %v %s", err, decided.body)
	}
	r.hook.mu.Lock()
	defer r.hook.mu.Unlock()
	var requested []hookDelivery
	for _, x := range r.hook.requests {
		if x.kind == "requested" {
			requested = append(requested, x)
		}
	}
	ok := 0
	for _, x := range requested {
		if x.id != d.id {
			t.Errorf("a retry changed the webhook-id: %s, first %s", x.id, d.id)
		}
		if x.status < 300 {
			ok++
		}
	}
	if len(requested) != 3 || ok != 1 {
		t.Errorf("request deliveries: %d attempts, %d successful; want 3 attempts (two failed), exactly one successful", len(requested), ok)
	}
}

// ladderPolicy needs two approvals of alice and bob, reminds after 2 s and
// adds carol, by email, after 3 s.
const ladderPolicy = `version: "ladder-e2e-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob]
    quorum: 2
    channels: ["email"]
    timeout: 1h
    reminders: [2s]
    escalation:
      - after: 3s
        approvers: [carol]
        channels: ["email"]
`

func TestReminderAndEscalationByEmailEndToEnd(t *testing.T) {
	r := newNotifyRig(t, 0, ladderPolicy)
	done := r.waitingPayment("run-ladder")
	first := r.mailTo("alice@example.com", "Approval needed")
	id := first.Header.Get("X-Countersign-Event-Id")
	// Alice approves over the API; one more approval is needed.
	var rec quorumRecord
	if code := r.must(r.tokens["alice"], "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, &rec); code != 200 {
		t.Fatalf("alice's vote: %d", code)
	}
	// The reminder reaches bob, who has not voted; alice gets none.
	rem := r.mailTo("bob@example.com", "Reminder")
	if rem.Header.Get("X-Countersign-Kind") != "reminder.1" {
		t.Errorf("reminder kind %q", rem.Header.Get("X-Countersign-Kind"))
	}
	// The tier adds carol, who is told by email and decides with her link.
	esc := r.mailTo("carol@example.com", "Approval needed")
	if esc.Header.Get("X-Countersign-Kind") != "escalation.1" {
		t.Errorf("escalation mail kind %q", esc.Header.Get("X-Countersign-Kind"))
	}
	link := regexp.MustCompile(`https?://[^\s"<>]+/e/[A-Za-z0-9._-]+`).FindString(esc.Text)
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h := regexp.MustCompile(`name="h" value="([0-9a-f]{64})"`).FindStringSubmatch(string(page))
	if h == nil {
		t.Fatalf("carol's page has no form:\n%s", page)
	}
	resp, err = http.PostForm(link, url.Values{"decision": {"approve"}, "h": {h[1]}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v, reason := r.verdict(done); v != "allowed" {
		t.Fatalf("verdict %s (%s), want allowed", v, reason)
	}
	final := r.record(id)
	if final.EscalationLevel != 1 || len(final.Votes) != 2 || final.Votes[1].Approver != (contracts.Approver{ID: "carol", Via: contracts.ViaEmail}) {
		t.Fatalf("record: level %d votes %+v", final.EscalationLevel, final.Votes)
	}
	for _, m := range r.smtp.Messages() {
		if len(m.To) == 1 && m.To[0] == "alice@example.com" {
			if c, _ := m.Content(); strings.Contains(c.Subject, "Reminder") {
				t.Errorf("alice, who had voted, was reminded")
			}
		}
	}
}
