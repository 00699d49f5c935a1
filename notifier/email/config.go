package email

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"net/url"
	"strings"
	"time"
)

// TLS modes of SMTPConfig.TLS.
const (
	// TLSStartTLS upgrades the connection with STARTTLS and refuses to send
	// when the server does not offer it. The default.
	TLSStartTLS = "starttls"
	// TLSOpportunistic uses STARTTLS when offered, else sends in clear text.
	TLSOpportunistic = "opportunistic"
	// TLSImplicit speaks TLS from the first byte (SMTPS, port 465).
	TLSImplicit = "tls"
	// TLSNone never encrypts; for a relay on the same host only.
	TLSNone = "none"
)

// Defaults of SMTPConfig.
const (
	DefaultHELO        = "countersign.localhost"
	DefaultSMTPTimeout = 10 * time.Second
	// DefaultPort is the submission port; DefaultImplicitTLSPort is used
	// with TLSImplicit.
	DefaultPort            = 587
	DefaultImplicitTLSPort = 465
)

// maxLinkLifetime caps how long a personal link is valid, whatever the
// request's expiry.
const maxLinkLifetime = 30 * 24 * time.Hour

// SMTPConfig says how to reach the submission server.
type SMTPConfig struct {
	Host string
	// Port defaults to 587, or 465 with TLS "tls".
	Port int
	// Username and Password enable SMTP AUTH (the strongest mechanism the
	// server offers; PLAIN and LOGIN only over TLS). The password is never
	// logged nor put in errors.
	Username, Password string
	// TLS is one of "starttls" (the default: STARTTLS is required),
	// "opportunistic", "tls" (implicit TLS) or "none".
	TLS string
	// HELO is the name the client greets with, "countersign.localhost" by
	// default. (The mail library's default is the bare host name, which
	// many servers reject.)
	HELO string
	// Timeout bounds connecting and each SMTP command; 10s by default.
	Timeout time.Duration
	// InsecureSkipVerify accepts any server certificate. For tests only:
	// it lets anyone on the path read the mail, and the links in it.
	InsecureSkipVerify bool
	// RootCAs verifies the server certificate; nil means the system roots.
	RootCAs *x509.CertPool
}

// String describes the server without the password.
func (c SMTPConfig) String() string {
	user := ""
	if c.Username != "" {
		user = c.Username + "@"
	}
	return fmt.Sprintf("smtp://%s%s:%d (tls=%s)", user, c.Host, c.Port, c.TLS)
}

// GoString is String, so that %#v does not print the password either.
func (c SMTPConfig) GoString() string { return c.String() }

// Config configures a Channel.
type Config struct {
	SMTP SMTPConfig
	// From is the sender, an RFC 5322 address such as
	// "Countersign <approvals@example.com>".
	From string
	// PublicURL is the absolute http(s) URL under which the Countersign
	// server is reached by approvers, e.g. "https://countersign.example.com";
	// links point to PublicURL + "/e/<token>" and the inbox.
	PublicURL string
	// Links signs the personal links. Required.
	Links *Links
	// Now is the clock; time.Now by default.
	Now func() time.Time
	// Logger receives delivery logs; discarded by default.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.SMTP.TLS == "" {
		c.SMTP.TLS = TLSStartTLS
	}
	if c.SMTP.Port == 0 {
		c.SMTP.Port = DefaultPort
		if c.SMTP.TLS == TLSImplicit {
			c.SMTP.Port = DefaultImplicitTLSPort
		}
	}
	if c.SMTP.HELO == "" {
		c.SMTP.HELO = DefaultHELO
	}
	if c.SMTP.Timeout == 0 {
		c.SMTP.Timeout = DefaultSMTPTimeout
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.SMTP.Host == "" || strings.ContainsAny(c.SMTP.Host, " \t\r\n/") {
		errs = append(errs, errors.New("SMTP.Host: a host name or IP address is required"))
	}
	if c.SMTP.Port < 1 || c.SMTP.Port > 65535 {
		errs = append(errs, fmt.Errorf("SMTP.Port: %d is not a port", c.SMTP.Port))
	}
	switch c.SMTP.TLS {
	case TLSStartTLS, TLSOpportunistic, TLSImplicit, TLSNone:
	default:
		errs = append(errs, fmt.Errorf("SMTP.TLS: %q: want starttls, opportunistic, tls or none", c.SMTP.TLS))
	}
	if strings.ContainsAny(c.SMTP.HELO, " \t\r\n") {
		errs = append(errs, fmt.Errorf("SMTP.HELO: %q is not a host name", c.SMTP.HELO))
	}
	if c.SMTP.Timeout < 0 {
		errs = append(errs, errors.New("SMTP.Timeout: must not be negative"))
	}
	if c.SMTP.Password != "" && c.SMTP.Username == "" {
		errs = append(errs, errors.New("SMTP.Username: required with a password"))
	}
	if _, err := mail.ParseAddress(c.From); err != nil {
		errs = append(errs, fmt.Errorf("From: %q is not an RFC 5322 address: %v", c.From, err))
	}
	if err := validPublicURL(c.PublicURL); err != nil {
		errs = append(errs, fmt.Errorf("PublicURL: %w", err))
	}
	if c.Links == nil {
		errs = append(errs, errors.New("Links: required to sign personal links"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("email: config: %w", err)
	}
	return nil
}

func validPublicURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an absolute http or https URL", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want no user info, query or fragment", s)
	}
	return nil
}
