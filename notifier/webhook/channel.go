package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Countersign's own headers, sent next to the Standard Webhooks ones so a
// receiver can route a message before decoding it.
const (
	// HeaderKind is the notification's kind: "requested", "reminder.<n>"
	// or "decided".
	HeaderKind = "countersign-kind"
	// HeaderEventID is the approval's event_id.
	HeaderEventID = "countersign-event-id"
)

// UserAgent is sent with every request.
const UserAgent = "Countersign-Webhook/1"

const (
	// maxResponseBody is how much of a response is read (and dropped) so
	// that the connection can be reused.
	maxResponseBody = 64 << 10
	// maxRetryAfter caps the delay a receiver can ask for.
	maxRetryAfter = time.Hour
)

// Log attribute keys.
const (
	logEndpoint = "endpoint"
	logEventID  = "event_id"
	logKind     = "kind"
	logStatus   = "status"
)

// Channel delivers notifications as Standard Webhooks. It implements
// notifier.Channel and is safe for concurrent use.
type Channel struct {
	client    *http.Client
	now       func() time.Time
	log       *slog.Logger
	endpoints map[string]*endpoint
}

var (
	_ notifier.Channel = (*Channel)(nil)
	_ notifier.Scoped  = (*Channel)(nil)
)

// Takes reports whether the endpoint named address receives requests of
// tenant (see Endpoint.Tenants); false for an unknown endpoint.
func (c *Channel) Takes(address, tenant string) bool {
	ep, ok := c.endpoints[address]
	return ok && ep.takes(tenant)
}

// endpoint is a validated Endpoint. Only disabled changes after New.
type endpoint struct {
	name     string
	url      string
	keys     [][]byte
	timeout  time.Duration
	disabled atomic.Bool
	// includeSensitive: sent the real values of sensitive arguments.
	includeSensitive bool
	// tenants the endpoint takes (see Endpoint.Tenants).
	tenants []string
}

// takes reports whether e receives requests of tenant.
func (e *endpoint) takes(tenant string) bool {
	if len(e.tenants) == 0 {
		return tenant == ""
	}
	return slices.Contains(e.tenants, "*") || tenant != "" && slices.Contains(e.tenants, tenant)
}

// New validates cfg and returns a Channel. Errors name the invalid field and
// the endpoint's index and name, never a URL or secret.
func New(cfg Config) (*Channel, error) {
	cfg.setDefaults()
	eps, err := cfg.endpoints()
	if err != nil {
		return nil, err
	}
	var client http.Client
	if cfg.Client != nil {
		client = *cfg.Client
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Channel{client: &client, now: cfg.Now, log: cfg.Logger, endpoints: eps}, nil
}

// Name is contracts.ChannelWebhook.
func (c *Channel) Name() string { return contracts.ChannelWebhook }

// Notify POSTs n.Request, the contracts.ApprovalRequested event, to the
// endpoint named n.Target.Address. n.Kind must be notifier.KindRequested, a
// notifier.KindReminder or a notifier.KindEscalation. On success the receipt's Ref is the webhook-id.
//
// On failure Notify returns the failed receipt (notifier.NewReceipt with the
// error) and the error: one wrapping notifier.ErrPermanent when a retry cannot
// help, possibly carrying notifier.RetryAfter, transient otherwise.
func (c *Channel) Notify(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if n.Kind != notifier.KindRequested && !strings.HasPrefix(n.Kind, "reminder.") && !strings.HasPrefix(n.Kind, "escalation.") {
		return c.fail(n, fmt.Errorf("%w: webhook: Notify cannot deliver kind %q", notifier.ErrPermanent, n.Kind))
	}
	n = c.shown(n)
	body, err := json.Marshal(n.Request)
	if err != nil {
		return c.fail(n, fmt.Errorf("%w: webhook: encoding the request: %v", notifier.ErrPermanent, err))
	}
	return c.deliver(ctx, n, body)
}

// Update POSTs a contracts.Decided event built from n.Record to the endpoint
// named n.Target.Address. n.Kind must be notifier.KindDecided and n.Record a
// terminal record; n.Ref is not needed. Results are as for Notify.
func (c *Channel) Update(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if n.Kind != notifier.KindDecided {
		return c.fail(n, fmt.Errorf("%w: webhook: Update cannot deliver kind %q", notifier.ErrPermanent, n.Kind))
	}
	if n.Record == nil || !n.Record.Terminal() {
		return c.fail(n, fmt.Errorf("%w: webhook: Update needs a terminal record", notifier.ErrPermanent))
	}
	n = c.shown(n)
	ev := decided(n.Record)
	if n.Event != nil && n.Event.EventID == ev.EventID {
		ev = *n.Event // as announced, with the record's revision
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return c.fail(n, fmt.Errorf("%w: webhook: encoding the outcome: %v", notifier.ErrPermanent, err))
	}
	return c.deliver(ctx, n, body)
}

// decided is the event announcing rec's outcome, for when the announced
// event is not at hand; the record's KV revision is then unknown (0).
func decided(rec *contracts.Record) contracts.Decided {
	d := contracts.Decided{
		Spec:      contracts.SpecDecided,
		EventID:   rec.Request.EventID,
		Status:    rec.Status,
		Agent:     rec.Request.Run.Agent,
		RunID:     rec.Request.Run.ID,
		Outcome:   rec.Outcome,
		DecidedAt: rec.UpdatedAt,
	}
	if rec.Request.ToolCall != nil {
		d.ToolName = rec.Request.ToolCall.Name
	}
	if rec.Outcome != nil && !rec.Outcome.DecidedAt.IsZero() {
		d.DecidedAt = rec.Outcome.DecidedAt
	}
	return d
}

// shown is n as its endpoint may see it: sensitive values masked unless
// the endpoint includes them.
func (c *Channel) shown(n notifier.Notification) notifier.Notification {
	if ep, ok := c.endpoints[n.Target.Address]; ok && ep.includeSensitive {
		return n
	}
	return n.Redacted()
}

func (c *Channel) fail(n notifier.Notification, err error) (notifier.Receipt, error) {
	return notifier.NewReceipt(n, "", err, c.now()), err
}

// deliver makes one attempt to POST body for n and classifies the result.
func (c *Channel) deliver(ctx context.Context, n notifier.Notification, body []byte) (notifier.Receipt, error) {
	ep, err := c.endpoint(n.Target.Address)
	if err != nil {
		return c.fail(n, err)
	}
	if ep.disabled.Load() {
		return c.fail(n, errDisabled(ep.name))
	}
	if !ep.takes(n.Request.Run.Tenant) {
		return c.fail(n, fmt.Errorf("%w: webhook: endpoint %q does not take requests of this tenant", notifier.ErrPermanent, ep.name))
	}

	id := n.IdempotencyKey()
	ts := c.now()
	sigs := make([]string, len(ep.keys))
	for i, k := range ep.keys {
		sigs[i] = Sign(k, id, ts, body)
	}

	attempt, cancel := context.WithTimeout(ctx, ep.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(attempt, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		// The URL was validated by New; the error would quote it.
		return c.fail(n, fmt.Errorf("%w: webhook: endpoint %q: cannot build the request", notifier.ErrPermanent, ep.name))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, strings.Join(sigs, " "))
	req.Header.Set(HeaderKind, n.Kind)
	req.Header.Set(HeaderEventID, n.EventID())
	// The receiver joins the trace of the bus message being delivered.
	if tp := contracts.TraceparentFrom(ctx); tp != "" {
		req.Header.Set(contracts.HeaderTraceparent, contracts.ChildTraceparent(tp))
	}

	resp, err := c.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("webhook: endpoint %q: %w", ep.name, ctx.Err())
		case attempt.Err() != nil:
			err = fmt.Errorf("webhook: endpoint %q: no response within %s", ep.name, ep.timeout)
		default:
			err = fmt.Errorf("webhook: endpoint %q: %s", ep.name, describe(err))
		}
		return c.fail(n, err)
	}
	// The body is not used; reading some of it lets the connection be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	_ = resp.Body.Close()

	c.log.Debug("webhook delivery", slog.String(logEndpoint, ep.name), slog.String(logEventID, n.EventID()),
		slog.String(logKind, n.Kind), slog.Int(logStatus, resp.StatusCode))
	if err := c.classify(ep, resp); err != nil {
		return c.fail(n, err)
	}
	return notifier.NewReceipt(n, id, nil, c.now()), nil
}

func (c *Channel) endpoint(name string) (*endpoint, error) {
	if ep, ok := c.endpoints[name]; ok {
		return ep, nil
	}
	if !contracts.ValidChannelName(name) {
		// Not a name; it could be a URL put where a name belongs.
		return nil, fmt.Errorf("%w: webhook: target address is not an endpoint name", notifier.ErrPermanent)
	}
	return nil, fmt.Errorf("%w: webhook: no endpoint named %q", notifier.ErrPermanent, name)
}

func errDisabled(name string) error {
	return fmt.Errorf("%w: webhook: endpoint %q disabled after 410 Gone", notifier.ErrPermanent, name)
}

// classify maps a response to nil (any 2xx), a transient error (408, 429,
// 5xx and anything unexpected, with the Retry-After delay if given) or a
// permanent one (redirects, 410 and other 4xx). A 410 disables ep.
func (c *Channel) classify(ep *endpoint, resp *http.Response) error {
	code := resp.StatusCode
	answered := fmt.Sprintf("webhook: endpoint %q answered %d %s", ep.name, code, http.StatusText(code))
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code == http.StatusGone:
		if ep.disabled.CompareAndSwap(false, true) {
			c.log.Warn("webhook endpoint disabled after 410 Gone; restart to enable it again",
				slog.String(logEndpoint, ep.name))
		}
		return errDisabled(ep.name)
	case code >= 300 && code <= 399:
		return fmt.Errorf("%w: %s (redirects are not followed)", notifier.ErrPermanent, answered)
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 && code <= 599:
		err := errors.New(answered)
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
			return notifier.RetryAfter(d, err)
		}
		return err
	case code >= 400 && code <= 499:
		return fmt.Errorf("%w: %s", notifier.ErrPermanent, answered)
	default:
		return errors.New(answered)
	}
}

// retryAfter reads a Retry-After value, delta-seconds or an HTTP-date, as a
// positive delay of at most maxRetryAfter.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if secs, ok := parseUnix(v); ok {
		if secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else {
		return 0, false
	}
	if d <= 0 {
		return 0, false
	}
	return min(d, maxRetryAfter), true
}

// describe says what kind of network failure err is without quoting it: the
// errors of net/http name the URL, and those of net the host.
func describe(err error) string {
	var (
		dns      *net.DNSError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &dns):
		return "DNS lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return "TLS certificate not accepted"
	case errors.As(err, &record):
		return "TLS handshake failed (is the endpoint plain http?)"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before a response"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "network timeout"
	default:
		return "request failed"
	}
}
