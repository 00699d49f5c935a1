package webhook

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
)

// DefaultTimeout bounds one delivery attempt to an endpoint whose Timeout is
// zero: connecting, sending and receiving the response status.
const DefaultTimeout = 10 * time.Second

// Config wires a Channel.
type Config struct {
	// Endpoints are the receivers a notification can address by name.
	// At least one is required.
	Endpoints []Endpoint
	// Client sends the requests (default: a client over
	// http.DefaultTransport). The Channel uses a copy whose CheckRedirect
	// refuses to follow redirects, whatever the given client does.
	Client *http.Client
	// Now is the clock (default time.Now). It dates webhook-timestamp and
	// receipts and reads Retry-After dates.
	Now func() time.Time
	// Logger defaults to discarding. Nothing logged holds a URL or secret.
	Logger *slog.Logger
}

// Endpoint is one receiver of webhooks.
type Endpoint struct {
	// Name identifies the endpoint in targets (notifier.Target.Address),
	// logs and errors: 1 to 32 characters of [a-z0-9_-], unique.
	Name string
	// URL is where notifications are POSTed: an absolute http or https URL.
	// It may hold a token and is never logged or put in an error.
	URL string
	// Secrets are the signing secrets ("whsec_" and base64; see
	// ParseSecret). Every secret signs every message: webhook-signature
	// carries one signature per secret, so during a rotation the endpoint
	// is configured with the old and the new secret and the receiver
	// accepts either. At least one is required.
	Secrets []string
	// Timeout bounds one attempt (default DefaultTimeout).
	Timeout time.Duration
	// IncludeSensitive sends this endpoint the real values of the
	// arguments a request lists as sensitive; by default they are masked
	// (approval.Mask) like in every other notification.
	IncludeSensitive bool
	// Tenants are the tenants whose requests this endpoint receives (their
	// requests, reminders, escalations and outcomes): "acme" for requests
	// whose run.tenant is acme, "*" for every request, with or without a
	// tenant. Without Tenants the endpoint receives only requests that
	// name no tenant, so a single-tenant installation works unchanged and
	// an endpoint nobody scoped gets nothing of any tenant's.
	Tenants []string
}

func (c *Config) setDefaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// endpoints validates the configured endpoints and returns them by name.
// Errors name an endpoint by its index and (valid) name, never by URL or
// secret.
func (c *Config) endpoints() (map[string]*endpoint, error) {
	if len(c.Endpoints) == 0 {
		return nil, errors.New("webhook: Config.Endpoints: at least one endpoint is required")
	}
	var errs []error
	byName := make(map[string]*endpoint, len(c.Endpoints))
	for i, e := range c.Endpoints {
		ep, problems := newEndpoint(e)
		where := fmt.Sprintf("webhook: Config.Endpoints[%d]", i)
		if contracts.ValidChannelName(e.Name) {
			where += fmt.Sprintf(" (%q)", e.Name)
		}
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("%s: %w", where, p))
		}
		if ep == nil {
			continue
		}
		if _, dup := byName[ep.name]; dup {
			errs = append(errs, fmt.Errorf("%s: Name: duplicate", where))
			continue
		}
		byName[ep.name] = ep
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return byName, nil
}

// newEndpoint returns the validated endpoint, or nil and the problems of e.
func newEndpoint(e Endpoint) (*endpoint, []error) {
	var errs []error
	if !contracts.ValidChannelName(e.Name) {
		// The value is not shown: a misplaced URL must not reach a log.
		errs = append(errs, errors.New("Name: want 1 to 32 characters of [a-z0-9_-]"))
	}
	if !validURL(e.URL) {
		errs = append(errs, errors.New("URL: want an absolute http or https URL"))
	}
	if len(e.Secrets) == 0 {
		errs = append(errs, errors.New("Secrets: at least one signing secret is required"))
	}
	keys := make([][]byte, 0, len(e.Secrets))
	for j, s := range e.Secrets {
		k, err := ParseSecret(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("Secrets[%d]: %w", j, err))
			continue
		}
		keys = append(keys, k)
	}
	timeout := e.Timeout
	switch {
	case timeout < 0:
		errs = append(errs, errors.New("Timeout: must not be negative"))
	case timeout == 0:
		timeout = DefaultTimeout
	}
	for j, t := range e.Tenants {
		if strings.TrimSpace(t) == "" || strings.TrimSpace(t) != t {
			errs = append(errs, fmt.Errorf("Tenants[%d]: want a tenant name or \"*\", got %q", j, t))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &endpoint{name: e.Name, url: e.URL, keys: keys, timeout: timeout, includeSensitive: e.IncludeSensitive,
		tenants: slices.Clone(e.Tenants)}, nil
}

func validURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Opaque == ""
}
