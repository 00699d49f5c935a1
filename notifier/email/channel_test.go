package email_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email"
	"github.com/countersign/countersign/notifier/email/smtptest"
)

const (
	eventID   = "0190d1a2-7b3c-7def-8123-456789abcdef"
	publicURL = "http://127.0.0.1:8080"
	from      = "Countersign <approvals@example.com>"
	password  = "s3cret-smtp-password"
)

var now = time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)

func clock() time.Time { return now }

// toolRequest is a pending tool call needing two approvals.
func toolRequest() contracts.ApprovalRequested {
	args := json.RawMessage(`{"amount":5000,"currency":"EUR","to":"ACME Ltd"}`)
	sha, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		panic(err)
	}
	return contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: eventID, Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: "run-42", Agent: "billing-agent", RequestedBy: "carol"},
		ToolCall: &contracts.ToolCall{ID: "call-1", Name: "payments.transfer", Arguments: args, ArgumentsSHA256: sha},
		Risk:     contracts.RiskHigh, Summary: "Transfer 5000 EUR to ACME Ltd",
		Policy:           contracts.PolicyRef{Rule: "large-payments", Version: "v7"},
		Quorum:           contracts.Quorum{Required: 2, Approvers: []string{"alice", "bob"}, Veto: true},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
		Channels:         []string{"email"},
		ExpiresAt:        now.Add(2*time.Hour + 30*time.Minute),
		CreatedAt:        now.Add(-time.Minute),
	}
}

func aliceTarget() notifier.Target {
	return notifier.Target{Channel: contracts.ChannelEmail, Address: "alice@example.com", Approver: "alice"}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newChannel returns a channel sending to srv without TLS, with changes
// applied to its config.
func newChannel(t *testing.T, srv *smtptest.Server, links *email.Links, change ...func(*email.Config)) *email.Channel {
	t.Helper()
	host, port := srv.Addr()
	cfg := email.Config{
		SMTP:      email.SMTPConfig{Host: host, Port: port, TLS: email.TLSNone, Timeout: 5 * time.Second},
		From:      from,
		PublicURL: publicURL + "/",
		Links:     links,
		Now:       clock,
	}
	for _, c := range change {
		c(&cfg)
	}
	ch, err := email.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func next(t *testing.T, srv *smtptest.Server) (smtptest.Message, smtptest.Content) {
	t.Helper()
	m, err := srv.Next(testContext(t))
	if err != nil {
		t.Fatalf("no message arrived: %v", err)
	}
	c, err := m.Content()
	if err != nil {
		t.Fatalf("message does not parse: %v\n%s", err, m.Data)
	}
	return m, c
}

var linkRE = regexp.MustCompile(regexp.QuoteMeta(publicURL) + `/e/([A-Za-z0-9._-]+)`)

// linkToken returns the token of the one personal link in text.
func linkToken(t *testing.T, text string) string {
	t.Helper()
	all := linkRE.FindAllStringSubmatch(text, -1)
	if len(all) != 1 {
		t.Fatalf("found %d personal links, want 1 in:\n%s", len(all), text)
	}
	return all[0][1]
}

func TestNotifySendsOneMessageWithHeadersAndParts(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	n := notifier.Requested(toolRequest(), aliceTarget())

	receipt, err := ch.Notify(testContext(t), n)
	if err != nil {
		t.Fatal(err)
	}
	wantID := "<" + n.IdempotencyKey() + "@countersign>"
	if receipt.Ref != wantID {
		t.Errorf("receipt = %+v, want Ref %s", receipt, wantID)
	}
	m, c := next(t, srv)
	if m.From != "approvals@example.com" || len(m.To) != 1 || m.To[0] != "alice@example.com" {
		t.Errorf("envelope from %q to %v", m.From, m.To)
	}
	if m.Helo != email.DefaultHELO {
		t.Errorf("HELO %q, want %q", m.Helo, email.DefaultHELO)
	}
	h := c.Header
	for name, want := range map[string]string{
		"Message-Id":             wantID,
		"Auto-Submitted":         "auto-generated",
		"X-Countersign-Event-Id": eventID,
		"X-Countersign-Kind":     "requested",
		"To":                     "<alice@example.com>",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	if addr, err := h.AddressList("From"); err != nil || len(addr) != 1 || addr[0].Address != "approvals@example.com" || addr[0].Name != "Countersign" {
		t.Errorf("From = %v, %v", addr, err)
	}
	if want := "[Countersign] Approval needed: payments.transfer — Transfer 5000 EUR to ACME Ltd"; c.Subject != want {
		t.Errorf("Subject = %q, want %q", c.Subject, want)
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "multipart/alternative") {
		t.Errorf("Content-Type = %q, want multipart/alternative", h.Get("Content-Type"))
	}
	for _, part := range []struct{ name, body string }{{"text", c.Text}, {"html", c.HTML}} {
		for _, want := range []string{
			"Approval needed: payments.transfer", "Transfer 5000 EUR to ACME Ltd", "billing-agent", "run-42",
			"high", "2026-07-01T12:30:00Z", "in 2 hours 30 minutes", "0 of 2 approvals", "large-payments", "v7",
			"ACME Ltd", "5000", "personal",
		} {
			if !strings.Contains(part.body, want) {
				t.Errorf("%s part lacks %q:\n%s", part.name, want, part.body)
			}
		}
	}
	if !strings.Contains(c.Text, `"amount": 5000`) {
		t.Errorf("text part does not show the indented arguments:\n%s", c.Text)
	}
}

func TestNotifyPersonalLinkIsSignedForEventAndApprover(t *testing.T) {
	srv := smtptest.Start(t)
	links := newLinks(t)
	ch := newChannel(t, srv, links)
	req := toolRequest()
	if _, err := ch.Notify(testContext(t), notifier.Requested(req, aliceTarget())); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	token := linkToken(t, c.Text)
	if htmlToken := linkToken(t, c.HTML); htmlToken != token {
		t.Errorf("the HTML part links to %q, the text part to %q", htmlToken, token)
	}
	claims, err := links.Verify(token, now)
	if err != nil {
		t.Fatalf("the link does not verify: %v", err)
	}
	if claims.EventID != eventID || claims.Approver != "alice" || !claims.Expires.Equal(req.ExpiresAt) {
		t.Errorf("link claims = %+v, want event %s, approver alice, expiry %s", claims, eventID, req.ExpiresAt)
	}
	if _, err := links.Verify(token, req.ExpiresAt); !errors.Is(err, email.ErrTokenExpired) {
		t.Errorf("the link at the request's expiry: %v, want ErrTokenExpired", err)
	}
	if !strings.Contains(c.Text, "answers once") {
		t.Errorf("the text does not say the link is single-use:\n%s", c.Text)
	}
}

func TestNotifyLinkExpiryIsCappedAt30Days(t *testing.T) {
	srv := smtptest.Start(t)
	links := newLinks(t)
	ch := newChannel(t, srv, links)
	req := toolRequest()
	req.ExpiresAt = now.Add(90 * 24 * time.Hour)
	if _, err := ch.Notify(testContext(t), notifier.Requested(req, aliceTarget())); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	claims, err := links.Verify(linkToken(t, c.Text), now)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(30 * 24 * time.Hour); !claims.Expires.Equal(want) {
		t.Errorf("link expires %s, want %s", claims.Expires, want)
	}
}

// TestNotifyRedeliveryRepeatsTheLink: a redelivered request carries the
// same personal link (the suite checks its Message-ID); a reminder, its own.
func TestNotifyRedeliveryRepeatsTheLink(t *testing.T) {
	srv := smtptest.Start(t)
	links := newLinks(t)
	ch := newChannel(t, srv, links)
	req := toolRequest()
	n := notifier.Requested(req, aliceTarget())
	for range 2 {
		if _, err := ch.Notify(testContext(t), n); err != nil {
			t.Fatal(err)
		}
	}
	_, c1 := next(t, srv)
	_, c2 := next(t, srv)
	if linkToken(t, c1.Text) != linkToken(t, c2.Text) {
		t.Error("redelivery changed the personal link")
	}

	// A reminder is a new email with its own link (and vote id).
	if _, err := ch.Notify(testContext(t), notifier.Reminder(req, aliceTarget(), 1)); err != nil {
		t.Fatal(err)
	}
	_, r := next(t, srv)
	if !strings.HasPrefix(r.Subject, "[Countersign] Reminder: Approval needed: payments.transfer") {
		t.Errorf("reminder subject %q", r.Subject)
	}
	if r.Header.Get("X-Countersign-Kind") != "reminder.1" {
		t.Errorf("reminder kind %q", r.Header.Get("X-Countersign-Kind"))
	}
	c1Claims, _ := links.Verify(linkToken(t, c1.Text), now)
	rClaims, _ := links.Verify(linkToken(t, r.Text), now)
	if email.VoteID(c1Claims) == email.VoteID(rClaims) {
		t.Error("the reminder's link has the request link's vote id")
	}
}

func TestNotifyEscapesAgentHTML(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	req := toolRequest()
	req.Summary = "Pay <script>alert(1)</script> now"
	req.Run.Agent = `<img src=x onerror=alert(2)>`
	req.ToolCall.Arguments = json.RawMessage(`{"note":"<script>alert(1)</script>"}`)
	if _, err := ch.Notify(testContext(t), notifier.Requested(req, aliceTarget())); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	for _, bad := range []string{"<script>", "<img"} {
		if strings.Contains(c.HTML, bad) {
			t.Errorf("HTML part contains %q:\n%s", bad, c.HTML)
		}
	}
	for _, want := range []string{"Pay &lt;script&gt;alert(1)&lt;/script&gt; now", "&lt;img src=x onerror=alert(2)&gt;", "&lt;script&gt;alert(1)&lt;/script&gt;"} {
		if !strings.Contains(c.HTML, want) {
			t.Errorf("HTML part lacks the escaped %q:\n%s", want, c.HTML)
		}
	}
}

func TestNotifyStripsControlCharactersFromAgentText(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	req := toolRequest()
	req.Summary = "Pay\r\n\r\nReview and answer:\r\nhttp://evil.example/e/x \u202eexe.pdf"
	if _, err := ch.Notify(testContext(t), notifier.Requested(req, aliceTarget())); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	if strings.Contains(c.Text, "\nhttp://evil.example") || strings.Contains(c.Text, "\u202e") || strings.Contains(c.Subject, "\u202e") {
		t.Errorf("agent text kept its line breaks or bidi override:\n%s", c.Text)
	}
	if !strings.Contains(c.Text, "Pay Review and answer: http://evil.example/e/x exe.pdf") {
		t.Errorf("the summary is not shown on one line:\n%s", c.Text)
	}
}

func TestNotifyWithoutApproverHasNoDecisionLink(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	target := notifier.Target{Channel: contracts.ChannelEmail, Address: "ops@example.com"}
	if _, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), target)); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	inbox := notifier.ApprovalURL(publicURL, eventID)
	for _, part := range []string{c.Text, c.HTML} {
		if strings.Contains(part, "/e/") {
			t.Errorf("an email to a plain address has a decision link:\n%s", part)
		}
		if !strings.Contains(part, inbox) {
			t.Errorf("an email to a plain address lacks the inbox link %s:\n%s", inbox, part)
		}
	}
}

func TestNotifyHumanInputShowsQuestion(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	req := humanRequest()
	if _, err := ch.Notify(testContext(t), notifier.Requested(req, aliceTarget())); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	if c.Subject != "[Countersign] Input needed by research-agent — research-agent asks: which dataset?" {
		t.Errorf("Subject = %q", c.Subject)
	}
	if !strings.Contains(c.Text, "> Which dataset should I use?\n> Reply with its id.") {
		t.Errorf("text part does not quote the question:\n%s", c.Text)
	}
	if strings.Contains(c.Text, "Arguments") || strings.Contains(c.Text, "Progress") {
		t.Errorf("a question shows arguments or a quorum:\n%s", c.Text)
	}
	linkToken(t, c.Text)
}

func TestNotifyOverSTARTTLSWithAuth(t *testing.T) {
	srv := smtptest.Start(t, smtptest.WithSTARTTLS(), smtptest.WithAuth("mailer", password))
	ch := newChannel(t, srv, newLinks(t), func(c *email.Config) {
		c.SMTP.TLS = "" // the default: STARTTLS required
		c.SMTP.Username, c.SMTP.Password = "mailer", password
		c.SMTP.RootCAs = srv.RootCAs()
	})
	if _, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), aliceTarget())); err != nil {
		t.Fatal(err)
	}
	m, _ := next(t, srv)
	if !m.TLS || m.User != "mailer" {
		t.Errorf("message arrived with TLS=%v user=%q, want STARTTLS and AUTH as mailer", m.TLS, m.User)
	}
}

func TestNotifyOverImplicitTLS(t *testing.T) {
	srv := smtptest.Start(t, smtptest.WithImplicitTLS())
	ch := newChannel(t, srv, newLinks(t), func(c *email.Config) {
		c.SMTP.TLS = email.TLSImplicit
		c.SMTP.RootCAs = srv.RootCAs()
	})
	if _, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), aliceTarget())); err != nil {
		t.Fatal(err)
	}
	if m, _ := next(t, srv); !m.TLS {
		t.Error("message arrived without TLS")
	}
}

// TestNotifyTLSAndAuthFailuresAreTransient covers failures a configuration
// change fixes: they are retried, never reported as permanent, and their
// errors do not show the password.
func TestNotifyTLSAndAuthFailuresAreTransient(t *testing.T) {
	tlsSrv := smtptest.Start(t, smtptest.WithSTARTTLS(), smtptest.WithAuth("mailer", password))
	plainSrv := smtptest.Start(t)
	tests := map[string]struct {
		srv    *smtptest.Server
		change func(*email.Config)
	}{
		"untrusted certificate": {tlsSrv, func(c *email.Config) {
			c.SMTP.TLS, c.SMTP.Username, c.SMTP.Password = email.TLSStartTLS, "mailer", password
		}},
		"wrong password": {tlsSrv, func(c *email.Config) {
			c.SMTP.TLS, c.SMTP.Username, c.SMTP.Password = email.TLSStartTLS, "mailer", password+"-wrong"
			c.SMTP.RootCAs = tlsSrv.RootCAs()
		}},
		"server without STARTTLS": {plainSrv, func(c *email.Config) {
			c.SMTP.TLS, c.SMTP.Username, c.SMTP.Password = email.TLSStartTLS, "mailer", password
		}},
	}
	for name, tt := range tests {
		ch := newChannel(t, tt.srv, newLinks(t), tt.change)
		receipt, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), aliceTarget()))
		if err == nil {
			t.Errorf("%s: Notify succeeded", name)
			continue
		}
		if errors.Is(err, notifier.ErrPermanent) || receipt.Permanent || receipt.Status != notifier.ReceiptFailed {
			t.Errorf("%s: error %v, receipt %+v, want a transient failure", name, err, receipt)
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%s: error shows the password: %v", name, err)
		}
	}
	if n := len(tlsSrv.Messages()) + len(plainSrv.Messages()); n != 0 {
		t.Errorf("%d messages were accepted", n)
	}
}

// TestRefusalNamesTheReplyCode: the error of a refused email quotes the
// server's reply (the suite checks how refusals are classified).
func TestRefusalNamesTheReplyCode(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	srv.FailNext(1, 451, "mailbox busy, try later")
	_, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), aliceTarget()))
	if err == nil || !strings.Contains(err.Error(), "451") {
		t.Errorf("451: error %v does not show the reply", err)
	}
}

// TestBadRecipientErrorShowsNoLink: the error of an address that is not
// one (permanent, as the suite checks) does not quote the signed link.
func TestBadRecipientErrorShowsNoLink(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	target := notifier.Target{Channel: contracts.ChannelEmail, Address: "not an address", Approver: "alice"}
	_, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), target))
	if err == nil {
		t.Fatal("Notify succeeded")
	}
	if strings.Contains(err.Error(), "/e/") {
		t.Errorf("error shows a link: %v", err)
	}
}

func decidedRecord() contracts.Record {
	req := toolRequest()
	edited := json.RawMessage(`{"amount":4000,"currency":"EUR","to":"ACME Ltd"}`)
	return contracts.Record{
		Spec: contracts.SpecRecord, Request: req, Status: contracts.StatusApproved, ExpiresAt: req.ExpiresAt,
		Votes: []contracts.Vote{
			{VoteID: "v1", EventID: eventID, Decision: contracts.DecisionEdit, Approver: contracts.Approver{ID: "alice", Via: contracts.ViaEmail}, Arguments: edited},
			{VoteID: "v2", EventID: eventID, Decision: contracts.DecisionApprove, Approver: contracts.Approver{ID: "bob", Via: contracts.ViaSlack}},
		},
		Outcome: &contracts.Outcome{
			Decision: contracts.DecisionEdit, Arguments: edited, Comment: "capped at 4000",
			DecidedBy: []string{"alice", "bob"}, DecidedAt: now.Add(time.Minute),
		},
	}
}

func TestUpdateRepliesToTheRequestEmail(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	sent, err := ch.Notify(testContext(t), notifier.Requested(toolRequest(), aliceTarget()))
	if err != nil {
		t.Fatal(err)
	}
	_, request := next(t, srv)

	rec := decidedRecord()
	n := notifier.Decided(rec, aliceTarget(), sent.Ref)
	receipt, err := ch.Update(testContext(t), n)
	if err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	wantID := "<" + n.IdempotencyKey() + "@countersign>"
	if receipt.Ref != wantID || c.Header.Get("Message-Id") != wantID {
		t.Errorf("update Message-ID %q, receipt Ref %q, want %s", c.Header.Get("Message-Id"), receipt.Ref, wantID)
	}
	if c.Header.Get("In-Reply-To") != sent.Ref || c.Header.Get("References") != sent.Ref {
		t.Errorf("In-Reply-To %q, References %q, want %s", c.Header.Get("In-Reply-To"), c.Header.Get("References"), sent.Ref)
	}
	if c.Subject != "Re: "+request.Subject {
		t.Errorf("Subject %q, want Re: %q", c.Subject, request.Subject)
	}
	if c.Header.Get("X-Countersign-Kind") != notifier.KindDecided || c.Header.Get("Auto-Submitted") != "auto-generated" {
		t.Errorf("kind %q, auto-submitted %q", c.Header.Get("X-Countersign-Kind"), c.Header.Get("Auto-Submitted"))
	}
	outcome := notifier.OutcomeLine(&rec)
	for _, part := range []string{c.Text, c.HTML} {
		if !strings.Contains(part, outcome) || !strings.Contains(part, "Final arguments") || !strings.Contains(part, "4000") {
			t.Errorf("update lacks the outcome %q or the final arguments:\n%s", outcome, part)
		}
		if strings.Contains(part, "/e/") {
			t.Errorf("update has a decision link:\n%s", part)
		}
	}
}

func TestUpdateWithoutRefStartsAThread(t *testing.T) {
	srv := smtptest.Start(t)
	ch := newChannel(t, srv, newLinks(t))
	if _, err := ch.Update(testContext(t), notifier.Decided(decidedRecord(), aliceTarget(), "")); err != nil {
		t.Fatal(err)
	}
	_, c := next(t, srv)
	if c.Header.Get("In-Reply-To") != "" || c.Header.Get("References") != "" {
		t.Errorf("In-Reply-To %q, References %q without a Ref", c.Header.Get("In-Reply-To"), c.Header.Get("References"))
	}
	if !strings.HasPrefix(c.Subject, "Re: [Countersign] ") {
		t.Errorf("Subject %q", c.Subject)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	links := newLinks(t)
	valid := email.Config{SMTP: email.SMTPConfig{Host: "smtp.example.com"}, From: from, PublicURL: publicURL, Links: links}
	if ch, err := email.New(valid); err != nil || ch.Name() != "email" {
		t.Fatalf("valid config: %v", err)
	}
	tests := map[string]struct {
		change func(*email.Config)
		field  string
	}{
		"no host":           {func(c *email.Config) { c.SMTP.Host = "" }, "SMTP.Host"},
		"bad port":          {func(c *email.Config) { c.SMTP.Port = 70000 }, "SMTP.Port"},
		"bad TLS mode":      {func(c *email.Config) { c.SMTP.TLS = "ssl" }, "SMTP.TLS"},
		"HELO with a space": {func(c *email.Config) { c.SMTP.HELO = "my host" }, "SMTP.HELO"},
		"password, no user": {func(c *email.Config) { c.SMTP.Password = password }, "SMTP.Username"},
		"no from":           {func(c *email.Config) { c.From = "" }, "From"},
		"bad from":          {func(c *email.Config) { c.From = "countersign at example" }, "From"},
		"relative URL":      {func(c *email.Config) { c.PublicURL = "/approvals" }, "PublicURL"},
		"ftp URL":           {func(c *email.Config) { c.PublicURL = "ftp://example.com" }, "PublicURL"},
		"URL with a query":  {func(c *email.Config) { c.PublicURL = "https://example.com/?a=b" }, "PublicURL"},
		"no links":          {func(c *email.Config) { c.Links = nil }, "Links"},
	}
	for name, tt := range tests {
		cfg := valid
		tt.change(&cfg)
		_, err := email.New(cfg)
		if err == nil || !strings.Contains(err.Error(), tt.field+":") {
			t.Errorf("%s: error %v, want one naming %s", name, err, tt.field)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("%s: error shows the password", name)
		}
	}
}

func TestSMTPConfigFormattingHidesPassword(t *testing.T) {
	c := email.SMTPConfig{Host: "smtp.example.com", Port: 587, Username: "mailer", Password: password}
	for _, s := range []string{c.String(), c.GoString()} {
		if strings.Contains(s, password) || !strings.Contains(s, "smtp.example.com") {
			t.Errorf("formatted config %q", s)
		}
	}
}

const humanEventID = "0190d1a2-7b3c-7def-8123-456789abcd00"

// humanRequest is a pending question with an answer schema.
func humanRequest() contracts.ApprovalRequested {
	return contracts.ApprovalRequested{
		Spec: contracts.SpecHumanInputRequested, EventID: humanEventID, Kind: contracts.KindHumanInput,
		Run: contracts.Run{ID: "run-7", Agent: "research-agent"},
		Question: &contracts.Question{
			Text:   "Which dataset should I use?\nReply with its id.",
			Schema: json.RawMessage(`{"type":"object","properties":{"dataset":{"type":"string"}},"required":["dataset"]}`),
		},
		Risk: contracts.RiskLow, Summary: "research-agent asks: which dataset?",
		Policy:           contracts.PolicyRef{Rule: "ask-humans", Version: "v7"},
		Quorum:           contracts.Quorum{Required: 1, Approvers: []string{"alice"}},
		AllowedDecisions: []string{contracts.DecisionAnswer},
		ExpiresAt:        now.Add(time.Hour),
		CreatedAt:        now,
	}
}
