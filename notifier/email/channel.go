package email

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	htmlpkg "html"
	"log/slog"
	"net/url"
	"strings"
	"time"

	mail "github.com/wneessen/go-mail"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Log attribute keys.
const (
	logEventID  = "event_id"
	logKind     = "kind"
	logApprover = "approver"
	logRef      = "message_id"
	logErr      = "err"
	logVoteID   = "vote_id"
	logDecision = "decision"
	logReason   = "reason"
)

// messageIDDomain is the right-hand side of the Message-IDs Countersign sets.
const messageIDDomain = "countersign"

// Channel delivers approval requests, reminders and outcomes by email. It is
// safe for concurrent use: every send opens its own SMTP connection.
type Channel struct {
	cfg Config
}

var _ notifier.Channel = (*Channel)(nil)

// New validates cfg and returns the channel.
func New(cfg Config) (*Channel, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Channel{cfg: cfg}, nil
}

// Name is "email".
func (c *Channel) Name() string { return contracts.ChannelEmail }

// Notify emails the pending request (or a reminder of it, or an escalation
// tier's first notice) to n.Target.Address; any other kind is a permanent
// error. When n.Target.Approver is set the email carries a personal link to
// a confirmation page; otherwise it links to the inbox. The Message-ID is
// derived from n.IdempotencyKey, so a redelivered notification has the same
// one (and the same link), and the receipt's Ref is that Message-ID.
func (c *Channel) Notify(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	now := c.cfg.Now()
	req := &n.Request
	if n.Kind == notifier.KindHeld {
		return c.held(ctx, n, now)
	}
	reminder := strings.HasPrefix(n.Kind, "reminder.")
	if n.Kind != notifier.KindRequested && !reminder && !strings.HasPrefix(n.Kind, "escalation.") {
		return c.failed(ctx, n, now, fmt.Errorf("%w: email: Notify cannot deliver kind %q", notifier.ErrPermanent, n.Kind))
	}
	view := newRequestView(req, reminder, now)
	if n.Target.Approver != "" {
		link, err := c.personalLink(n, now)
		if err != nil {
			return c.failed(ctx, n, now, err)
		}
		view.ReviewURL, view.Approver = link, oneLine(n.Target.Approver)
	} else {
		view.InboxURL = notifier.ApprovalURL(c.cfg.PublicURL, req.EventID)
	}
	if notifier.NeedsPasskey(req) {
		view.SignURL = notifier.ApprovalURL(c.cfg.PublicURL, req.EventID)
	}
	text, html, err := render("request", view)
	if err != nil {
		return c.failed(ctx, n, now, fmt.Errorf("%w: email: render: %v", notifier.ErrPermanent, err))
	}
	id := messageID(n)
	m, err := c.message(n, id, subject(req, reminder), text, html, now)
	if err != nil {
		return c.failed(ctx, n, now, err)
	}
	if err := c.send(ctx, m); err != nil {
		return c.failed(ctx, n, now, err)
	}
	c.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "email sent",
		slog.String(logEventID, req.EventID), slog.String(logKind, n.Kind), slog.String(logRef, id))
	return notifier.NewReceipt(n, id, nil, now), nil
}

// held emails the line that more requests wait in the inbox
// (notifier.KindHeld); it shows nothing of any request and carries no
// personal link.
func (c *Channel) held(ctx context.Context, n notifier.Notification, now time.Time) (notifier.Receipt, error) {
	line := notifier.HeldLine(n.HeldUntil)
	inbox := notifier.InboxURL(c.cfg.PublicURL)
	text := line + "\n"
	html := "<!doctype html><html><body><p>" + htmlpkg.EscapeString(line) + "</p>"
	if inbox != "" {
		text += "\nOpen the inbox: " + inbox + "\n"
		html += `<p><a href="` + htmlpkg.EscapeString(inbox) + `">Open the inbox</a></p>`
	}
	html += "</body></html>"
	id := messageID(n)
	m, err := c.message(n, id, "More approval requests are waiting in Countersign", text, html, now)
	if err != nil {
		return c.failed(ctx, n, now, err)
	}
	if err := c.send(ctx, m); err != nil {
		return c.failed(ctx, n, now, err)
	}
	return notifier.NewReceipt(n, id, nil, now), nil
}

// Update emails the outcome of a decided request (n.Kind KindDecided, with
// its terminal record) to n.Target.Address, as a reply to the request email
// when n.Ref (its Message-ID) is known.
func (c *Channel) Update(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	now := c.cfg.Now()
	if n.Kind != notifier.KindDecided {
		return c.failed(ctx, n, now, fmt.Errorf("%w: email: Update cannot deliver kind %q", notifier.ErrPermanent, n.Kind))
	}
	if n.Record == nil || !n.Record.Terminal() {
		return c.failed(ctx, n, now, fmt.Errorf("%w: email: update of %s without a terminal record", notifier.ErrPermanent, n.Request.EventID))
	}
	view := newDecidedView(n.Record)
	view.InboxURL = notifier.ApprovalURL(c.cfg.PublicURL, n.Request.EventID)
	text, html, err := render("decided", view)
	if err != nil {
		return c.failed(ctx, n, now, fmt.Errorf("%w: email: render: %v", notifier.ErrPermanent, err))
	}
	id := messageID(n)
	m, err := c.message(n, id, "Re: "+subject(&n.Request, false), text, html, now)
	if err != nil {
		return c.failed(ctx, n, now, err)
	}
	if ref := threadRef(n.Ref); ref != "" {
		m.SetGenHeader(mail.HeaderInReplyTo, ref)
		m.SetGenHeader(mail.HeaderReferences, ref)
	}
	if err := c.send(ctx, m); err != nil {
		return c.failed(ctx, n, now, err)
	}
	c.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "email sent",
		slog.String(logEventID, n.Request.EventID), slog.String(logKind, n.Kind), slog.String(logRef, id))
	return notifier.NewReceipt(n, id, nil, now), nil
}

// failed logs a failed delivery and returns its receipt with err. Errors
// never hold the SMTP password nor a link.
func (c *Channel) failed(ctx context.Context, n notifier.Notification, now time.Time, err error) (notifier.Receipt, error) {
	level := slog.LevelWarn
	if errors.Is(err, notifier.ErrPermanent) {
		level = slog.LevelError
	}
	c.cfg.Logger.LogAttrs(ctx, level, "email not sent",
		slog.String(logEventID, n.Request.EventID), slog.String(logKind, n.Kind), slog.String(logErr, err.Error()))
	return notifier.NewReceipt(n, "", err, now), err
}

// personalLink signs the link of n's approver. Its nonce comes from the
// idempotency key, so a redelivery carries the same link; it expires with
// the request, at most maxLinkLifetime from now.
func (c *Channel) personalLink(n notifier.Notification, now time.Time) (string, error) {
	exp := n.Request.ExpiresAt
	if limit := now.Add(maxLinkLifetime); exp.IsZero() || exp.After(limit) {
		exp = limit
	}
	token, err := c.cfg.Links.Sign(Claims{
		EventID:  n.Request.EventID,
		Approver: n.Target.Approver,
		Expires:  exp,
		Nonce:    c.cfg.Links.nonceFor(n.IdempotencyKey()),
	})
	if err != nil {
		return "", fmt.Errorf("%w: %v", notifier.ErrPermanent, err)
	}
	return c.cfg.PublicURL + "/e/" + url.PathEscape(token), nil
}

// messageID is the Message-ID of n, with angle brackets.
func messageID(n notifier.Notification) string {
	return "<" + n.IdempotencyKey() + "@" + messageIDDomain + ">"
}

// threadRef makes a receipt's Ref usable in In-Reply-To and References:
// "<id@domain>", or "" when it is not a message id.
func threadRef(ref string) string {
	ref = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(ref), "<"), ">")
	if !strings.Contains(ref, "@") {
		return ""
	}
	for i := 0; i < len(ref); i++ {
		if c := ref[i]; c <= ' ' || c >= 0x7f || c == '<' || c == '>' {
			return ""
		}
	}
	return "<" + ref + ">"
}

// message builds the email. An address the library refuses is permanent.
func (c *Channel) message(n notifier.Notification, id, subj, text, html string, now time.Time) (*mail.Msg, error) {
	m := mail.NewMsg(mail.WithNoDefaultUserAgent())
	if err := m.From(c.cfg.From); err != nil {
		return nil, fmt.Errorf("%w: email: from address: %v", notifier.ErrPermanent, err)
	}
	if err := m.To(n.Target.Address); err != nil {
		return nil, fmt.Errorf("%w: email: recipient %q: %v", notifier.ErrPermanent, n.Target.Address, err)
	}
	m.Subject(subj)
	m.SetMessageIDWithValue(strings.TrimSuffix(strings.TrimPrefix(id, "<"), ">"))
	m.SetDateWithValue(now)
	m.SetUserAgent("Countersign")
	m.SetGenHeader("Auto-Submitted", "auto-generated")
	// Asks Exchange not to answer with out-of-office replies.
	m.SetGenHeader("X-Auto-Response-Suppress", "All")
	m.SetGenHeader("X-Countersign-Event-Id", n.Request.EventID)
	m.SetGenHeader("X-Countersign-Kind", n.Kind)
	m.SetBodyString(mail.TypeTextPlain, text)
	m.AddAlternativeString(mail.TypeTextHTML, html)
	return m, nil
}

// send delivers m over a new connection and classifies failures: a 5xx
// answer to MAIL, RCPT or DATA is permanent (notifier.ErrPermanent); 4xx
// answers, connection, TLS and authentication failures and timeouts are
// transient.
func (c *Channel) send(ctx context.Context, m *mail.Msg) error {
	client, err := c.client()
	if err != nil {
		return fmt.Errorf("%w: email: smtp client: %v", notifier.ErrPermanent, err)
	}
	err = client.DialAndSendWithContext(ctx, m)
	if err == nil {
		return nil
	}
	if code, ok := permanentCode(err); ok {
		return fmt.Errorf("%w: email: smtp %s:%d refused the message (%d): %v", notifier.ErrPermanent, c.cfg.SMTP.Host, c.cfg.SMTP.Port, code, err)
	}
	return fmt.Errorf("email: smtp %s:%d: %w", c.cfg.SMTP.Host, c.cfg.SMTP.Port, err)
}

// permanentCode returns the SMTP code of a 5xx refusal of a transaction.
func permanentCode(err error) (int, bool) {
	var se *mail.SendError
	if !errors.As(err, &se) || se.IsTemp() {
		return 0, false
	}
	switch se.Reason {
	case mail.ErrSMTPMailFrom, mail.ErrSMTPRcptTo, mail.ErrSMTPData, mail.ErrSMTPDataClose:
		if code := se.ErrorCode(); code >= 500 && code <= 599 {
			return code, true
		}
	}
	return 0, false
}

// client configures a mail client for one send.
func (c *Channel) client() (*mail.Client, error) {
	s := c.cfg.SMTP
	opts := []mail.Option{
		mail.WithPort(s.Port),
		mail.WithHELO(s.HELO),
		mail.WithTimeout(s.Timeout),
		mail.WithTLSConfig(&tls.Config{
			ServerName:         s.Host,
			MinVersion:         tls.VersionTLS12,
			RootCAs:            s.RootCAs,
			InsecureSkipVerify: s.InsecureSkipVerify, //nolint:gosec // documented as tests only
		}),
	}
	switch s.TLS {
	case TLSStartTLS:
		opts = append(opts, mail.WithTLSPolicy(mail.TLSMandatory))
	case TLSOpportunistic:
		opts = append(opts, mail.WithTLSPolicy(mail.TLSOpportunistic))
	case TLSImplicit:
		opts = append(opts, mail.WithSSL())
	case TLSNone:
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS))
	}
	if s.Username != "" {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthAutoDiscover),
			mail.WithUsername(s.Username), mail.WithPassword(s.Password))
	}
	return mail.NewClient(s.Host, opts...)
}
