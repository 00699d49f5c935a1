package auditsink

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/notifier/webhook"
)

// Formats of what a sink receives.
const (
	// FormatOCSF sends each entry as an OCSF API Activity event.
	FormatOCSF = "ocsf"
	// FormatNative sends each entry as the log holds it, with its stream
	// sequence: {"seq": N, "entry": {...}}, a bundle's entry line without
	// the chain hash.
	FormatNative = "native"
)

// DurablePrefix starts the name of a sink's durable consumer on
// HITL_AUDIT; the sink's name ends it.
const DurablePrefix = "audit-sink-"

// Defaults of a Sink.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultAttempts   = 30
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = time.Minute
)

// Config wires the sinks.
type Config struct {
	// JS reads HITL_AUDIT with one durable consumer per sink.
	JS    jetstream.JetStream
	Sinks []Sink
	// Client sends HTTP deliveries (default: a client over
	// http.DefaultTransport); it never follows redirects.
	Client *http.Client
	// Now dates webhook-timestamp and syslog timestamps (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// OnDeadLetter is called when an entry is given up on for a sink.
	OnDeadLetter func(stream, reason string)
}

// Sink is one receiver of every audit log entry.
type Sink struct {
	// Name names the sink's durable consumer (audit-sink-<name>), its
	// logs and errors: 1 to 32 characters of [a-z0-9_-], unique.
	Name string
	// URL is an http or https endpoint that is POSTed each entry, signed
	// per Standard Webhooks with every one of Secrets (at least one).
	URL     string
	Secrets []string
	// Headers are sent with every HTTP delivery (an API key, say); they
	// may not replace the signature headers or Content-Type.
	Headers map[string]string
	// Syslog is a syslog receiver over TLS, tcp+tls://host:port (RFC 5425
	// framing, RFC 5424 messages). CAFile is the PEM bundle that verifies
	// its certificate (default: the system roots); CertFile and KeyFile a
	// client certificate, when the receiver asks for one.
	Syslog                    string
	CAFile, CertFile, KeyFile string
	// Format is FormatOCSF (default) or FormatNative.
	Format string
	// Tenants are the tenants whose entries this sink receives, as for a
	// webhook endpoint: "acme", or "*" for every entry; without Tenants it
	// receives only entries that name no tenant.
	Tenants []string
	// Timeout bounds one attempt; Attempts bounds the deliveries of one
	// entry before it is dead-lettered; Backoff is the first delay after a
	// failure, doubling up to MaxBackoff.
	Timeout             time.Duration
	Attempts            int
	Backoff, MaxBackoff time.Duration
}

var namePattern = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

func (c *Config) setDefaults() {
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if s.Format == "" {
			s.Format = FormatOCSF
		}
		if s.Timeout == 0 {
			s.Timeout = DefaultTimeout
		}
		if s.Attempts == 0 {
			s.Attempts = DefaultAttempts
		}
		if s.Backoff == 0 {
			s.Backoff = DefaultBackoff
		}
		if s.MaxBackoff == 0 {
			s.MaxBackoff = DefaultMaxBackoff
		}
	}
}

// Validate reports what is wrong with c (its defaults applied), naming the
// sink and field; never a URL or secret.
func (c *Config) Validate() error {
	d := *c
	d.Sinks = slices.Clone(c.Sinks)
	d.setDefaults()
	var errs []error
	seen := map[string]bool{}
	for i, s := range d.Sinks {
		for _, err := range s.validate() {
			errs = append(errs, fmt.Errorf("auditsink: Sinks[%d] (%s): %w", i, s.Name, err))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("auditsink: Sinks[%d]: Name %q is used twice", i, s.Name))
		}
		seen[s.Name] = true
	}
	return errors.Join(errs...)
}

func (s *Sink) validate() []error {
	var errs []error
	if !namePattern.MatchString(s.Name) {
		errs = append(errs, errors.New("Name: want 1 to 32 characters of [a-z0-9_-]"))
	}
	if (s.URL == "") == (s.Syslog == "") {
		errs = append(errs, errors.New("want one of URL and Syslog"))
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" {
			errs = append(errs, errors.New("URL: want an absolute http or https URL"))
		}
		if len(s.Secrets) == 0 {
			errs = append(errs, errors.New("Secrets: an HTTP sink signs every delivery; give at least one"))
		}
		for j, sec := range s.Secrets {
			if _, err := webhook.ParseSecret(sec); err != nil {
				errs = append(errs, fmt.Errorf("Secrets[%d]: %w", j, err))
			}
		}
	}
	if s.Syslog != "" {
		if u, err := url.Parse(s.Syslog); err != nil || u.Scheme != "tcp+tls" || u.Port() == "" {
			errs = append(errs, errors.New("Syslog: want tcp+tls://host:port"))
		}
	}
	for k := range s.Headers {
		if h := strings.ToLower(k); strings.HasPrefix(h, "webhook-") || h == "content-type" || h == "content-length" {
			errs = append(errs, fmt.Errorf("Headers: %s is set by the sink", k))
		}
	}
	if s.Format != FormatOCSF && s.Format != FormatNative {
		errs = append(errs, fmt.Errorf("Format: want %s or %s, got %q", FormatOCSF, FormatNative, s.Format))
	}
	for j, t := range s.Tenants {
		if t == "" || strings.ContainsAny(t, " \t") {
			errs = append(errs, fmt.Errorf("Tenants[%d]: want a tenant name or \"*\", got %q", j, t))
		}
	}
	if s.Attempts < 2 || s.Timeout < 0 || s.Backoff < 0 || s.MaxBackoff < s.Backoff {
		errs = append(errs, errors.New("Attempts must be at least 2, Timeout and Backoff not negative, MaxBackoff not below Backoff"))
	}
	return errs
}

// takes reports whether the sink receives an entry of tenant (the rule of
// a webhook endpoint's Tenants).
func (s *Sink) takes(tenant string) bool {
	if len(s.Tenants) == 0 {
		return tenant == ""
	}
	return slices.Contains(s.Tenants, "*") || tenant != "" && slices.Contains(s.Tenants, tenant)
}

// tlsConfig is the TLS configuration of a syslog sink.
func (s *Sink) tlsConfig(host string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CAFile: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CAFile %s: no PEM certificate in it", s.CAFile)
		}
	}
	if s.CertFile != "" || s.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("CertFile, KeyFile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
