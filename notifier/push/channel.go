package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Config configures a Channel.
type Config struct {
	// VAPID signs every request to a push service.
	VAPID *VAPID
	// Devices holds the people's subscriptions.
	Devices Devices
	// Actions signs the one-tap actions; nil: notifications only open the
	// inbox.
	Actions *Actions
	// PublicURL is what notifications link to (the inbox) and post actions
	// to (PublicURL + "/v1/push/actions").
	PublicURL string
	// Quiet holds a person's non-critical pushes in their quiet hours:
	// person id to window; nil or absent: never quiet.
	Quiet map[string]QuietHours
	// QuietOf, when set, answers a person's own quiet hours (a live
	// directory's), asked at each push; Quiet is read where it answers
	// none.
	QuietOf func(person string) (QuietHours, bool)
	// AllowInsecure accepts http:// endpoints on loopback hosts (tests and
	// local push services); production endpoints are https only.
	AllowInsecure bool
	// Client sends the requests (default: 10 s timeout, no redirects).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// Channel delivers notifications by Web Push. It implements
// notifier.Channel; its targets are people (Target.Approver, Address the
// person's id), each delivered to every device they subscribed.
type Channel struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg and returns the channel.
func New(cfg Config) (*Channel, error) {
	var errs []error
	if cfg.VAPID == nil {
		errs = append(errs, errors.New("push: Config.VAPID is required"))
	}
	if cfg.Devices == nil {
		errs = append(errs, errors.New("push: Config.Devices is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Channel{cfg: cfg, log: cfg.Logger}, nil
}

// Name implements notifier.Channel.
func (c *Channel) Name() string { return contracts.ChannelPush }

// Notify implements notifier.Channel: a request, reminder or escalation to
// every device of the target person, or a KindHeld message.
func (c *Channel) Notify(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if n.Kind == notifier.KindDecided {
		return c.receipt(n, "", fmt.Errorf("%w: an outcome goes through Update", notifier.ErrPermanent))
	}
	if n.Kind != notifier.KindHeld && n.Request.Risk != contracts.RiskCritical {
		if q, ok := c.quietOf(n.Target.Approver); ok {
			if on, until := q.Active(c.cfg.Now()); on {
				return c.receipt(n, "", notifier.HeldUntil(until, fmt.Errorf("held by %s's quiet hours", n.Target.Approver)))
			}
		}
	}
	ref, err := c.send(ctx, n)
	return c.receipt(n, ref, err)
}

// quietOf is person's quiet hours: their own, else the configured ones.
func (c *Channel) quietOf(person string) (QuietHours, bool) {
	if person == "" {
		return QuietHours{}, false
	}
	if c.cfg.QuietOf != nil {
		if q, ok := c.cfg.QuietOf(person); ok {
			return q, true
		}
	}
	q, ok := c.cfg.Quiet[person]
	return q, ok
}

// receipt is the receipt of n with ref, or failed with err.
func (c *Channel) receipt(n notifier.Notification, ref string, err error) (notifier.Receipt, error) {
	return notifier.NewReceipt(n, ref, err, c.cfg.Now()), err
}

// Update implements notifier.Channel: the outcome replaces the request's
// notification on every device (the same tag), without actions.
func (c *Channel) Update(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if n.Kind != notifier.KindDecided || n.Record == nil || !n.Record.Terminal() {
		return c.receipt(n, "", fmt.Errorf("%w: Update takes an outcome with its terminal record", notifier.ErrPermanent))
	}
	ref, err := c.send(ctx, n)
	return c.receipt(n, ref, err)
}

// send renders n for its person and delivers it to each of their devices.
// It returns the receipt's Ref: the devices delivered to.
func (c *Channel) send(ctx context.Context, n notifier.Notification) (string, error) {
	person := n.Target.Approver
	if person == "" || n.Target.Address != person {
		return "", fmt.Errorf("%w: a push target is a person (%q)", notifier.ErrPermanent, n.Target.Address)
	}
	devices, err := c.cfg.Devices.Devices(ctx, person)
	if err != nil {
		return "", err
	}
	if len(devices) == 0 {
		return "", fmt.Errorf("%w: %s has subscribed no device to push notifications", notifier.ErrPermanent, person)
	}
	body, err := c.render(n)
	if err != nil {
		return "", err
	}
	return c.deliver(ctx, n, person, devices, body)
}

// render is the message of n for its person, with one-tap actions where
// they are allowed.
func (c *Channel) render(n notifier.Notification) ([]byte, error) {
	if n.Kind == notifier.KindHeld {
		return heldMessage(n, c.cfg.PublicURL).encode()
	}
	shown := n.Redacted()
	m := message(shown, c.cfg.PublicURL)
	if n.Kind != notifier.KindDecided && c.cfg.Actions != nil && OneTap(&n.Request) {
		acts, err := c.actions(n)
		if err != nil {
			return nil, err
		}
		m.Actions, m.ActionURL = acts, strings.TrimRight(c.cfg.PublicURL, "/")+ActionPath
	}
	return m.encode()
}

// ActionPath is where the service worker posts an action's token.
const ActionPath = "/v1/push/actions"

// actions signs approve and reject for n's person, bound to the arguments
// of the request (the hash of the real arguments, which the arbiter checks
// against the record when the vote arrives: a request edited meanwhile
// refuses it as stale).
func (c *Channel) actions(n notifier.Notification) ([]MessageAction, error) {
	out := make([]MessageAction, 0, 3)
	for _, d := range []struct{ decision, title string }{{contracts.DecisionApprove, "Approve"}, {contracts.DecisionReject, "Reject"}} {
		tok, err := c.cfg.Actions.Sign(Action{EventID: n.Request.EventID, Approver: n.Target.Approver, Decision: d.decision,
			ArgumentsSHA256: n.Request.ToolCall.ArgumentsSHA256, Expires: n.Request.ExpiresAt,
			Nonce: c.cfg.Actions.nonceFor(n.IdempotencyKey(), d.decision)})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", notifier.ErrPermanent, err)
		}
		out = append(out, MessageAction{Action: d.decision, Title: d.title, Token: tok})
	}
	return append(out, MessageAction{Action: ActionOpen, Title: "Open"}), nil
}

// deliver sends body to every device: delivered to any is delivered (the
// receipt's Ref lists them); gone devices are forgotten; a transient
// failure of any device asks for another try (the tag and Topic keep a
// device that got it already from showing it twice).
func (c *Channel) deliver(ctx context.Context, n notifier.Notification, person string, devices []contracts.PushDevice, body []byte) (string, error) {
	var (
		sent      []string
		transient error
		problems  []string
	)
	for _, d := range devices {
		err := c.post(ctx, n, d, body)
		switch {
		case err == nil:
			sent = append(sent, d.ID)
		case errors.Is(err, errGone):
			c.log.Info("push subscription gone; forgetting it", "person", person, "device", d.ID)
			if ferr := c.cfg.Devices.Forget(ctx, person, d.ID); ferr != nil {
				c.log.Warn("could not forget a gone push subscription", "person", person, "device", d.ID, "err", ferr)
			}
			problems = append(problems, d.ID+": gone")
		case errors.Is(err, notifier.ErrPermanent):
			problems = append(problems, d.ID+": "+err.Error())
		default:
			transient = err
		}
	}
	c.delivered(ctx, person, devices, sent)
	if transient != nil {
		return "", transient
	}
	if len(sent) == 0 {
		return "", fmt.Errorf("%w: no device of %s took the notification (%s)", notifier.ErrPermanent, person, strings.Join(problems, "; "))
	}
	return strings.Join(sent, ","), nil
}

// delivered records the delivery to the devices sent to whose last one is
// contracts.PushDeliveredEvery old or more. Failing to record it fails no
// notification.
func (c *Channel) delivered(ctx context.Context, person string, devices []contracts.PushDevice, sent []string) {
	now := c.cfg.Now()
	var due []string
	for _, d := range devices {
		if slices.Contains(sent, d.ID) && now.Sub(d.LastDeliveredAt) >= contracts.PushDeliveredEvery {
			due = append(due, d.ID)
		}
	}
	if len(due) == 0 {
		return
	}
	if err := c.cfg.Devices.Delivered(ctx, person, due, now); err != nil {
		c.log.Warn("could not record a push delivery on the devices", "person", person, "err", err)
	}
}

// errGone: the push service no longer knows the subscription (404, 410).
var errGone = errors.New("push: subscription gone")

// post sends one encrypted message to one device (RFC 8030 §5).
func (c *Channel) post(ctx context.Context, n notifier.Notification, d contracts.PushDevice, body []byte) error {
	if err := CheckEndpoint(d.Endpoint, c.cfg.AllowInsecure); err != nil {
		return fmt.Errorf("%w: %v", notifier.ErrPermanent, err)
	}
	pub, auth, err := ParseKeys(d.P256DH, d.Auth)
	if err != nil {
		return fmt.Errorf("%w: %v", notifier.ErrPermanent, err)
	}
	enc, err := Encrypt(body, Subscription{Endpoint: d.Endpoint, P256DH: pub, Auth: auth})
	if err != nil {
		return fmt.Errorf("%w: %v", notifier.ErrPermanent, err)
	}
	now := c.cfg.Now()
	authz, err := c.cfg.VAPID.Authorization(d.Endpoint, now, 12*time.Hour)
	if err != nil {
		return fmt.Errorf("%w: %v", notifier.ErrPermanent, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Endpoint, bytes.NewReader(enc))
	if err != nil {
		return fmt.Errorf("%w: %v", notifier.ErrPermanent, err)
	}
	req.Header.Set("Content-Encoding", "aes128gcm")
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", authz)
	req.Header.Set("TTL", strconv.Itoa(ttl(n, now)))
	req.Header.Set("Urgency", urgency(n))
	req.Header.Set("Topic", topic(n.Request.EventID))
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("push: %s: %w", hostOf(d.Endpoint), err) // transient: unreachable, timed out
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return status(resp, d.Endpoint)
}

// status maps a push service's answer: 2xx delivered, 404/410 gone, 429
// and 5xx transient (with Retry-After), any other permanent.
func status(resp *http.Response, endpoint string) error {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusNotFound || code == http.StatusGone:
		return errGone
	case code == http.StatusTooManyRequests || code >= 500:
		err := fmt.Errorf("push: %s answered %d", hostOf(endpoint), code)
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s >= 0 {
			return notifier.RetryAfter(time.Duration(s)*time.Second, err)
		}
		return err
	default:
		return fmt.Errorf("%w: %s answered %d", notifier.ErrPermanent, hostOf(endpoint), code)
	}
}

// ttl is how long the push service keeps a message for an offline
// device: until the request's deadline (a day at most), an hour for an
// outcome or a held message.
func ttl(n notifier.Notification, now time.Time) int {
	if n.Kind == notifier.KindDecided || n.Kind == notifier.KindHeld || n.Request.ExpiresAt.IsZero() {
		return 3600
	}
	d := min(n.Request.ExpiresAt.Sub(now), 24*time.Hour)
	return max(int(d/time.Second), 0)
}

// urgency is RFC 8030's Urgency: high for high and critical risk.
func urgency(n notifier.Notification) string {
	switch {
	case n.Kind == notifier.KindDecided || n.Kind == notifier.KindHeld:
		return "low"
	case n.Request.Risk == contracts.RiskHigh || n.Request.Risk == contracts.RiskCritical:
		return "high"
	}
	return "normal"
}

// hostOf names an endpoint in errors and logs by its host only: the path
// identifies the subscription.
func hostOf(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "the push service"
	}
	return u.Host
}

// MaxEndpointLen bounds a subscription's endpoint.
const MaxEndpointLen = 1024

// CheckEndpoint accepts a push resource URL: https with a host, no user
// info or fragment, at most MaxEndpointLen bytes; with allowInsecure, also
// http on a loopback host (127.0.0.1, ::1, localhost).
func CheckEndpoint(endpoint string, allowInsecure bool) error {
	if len(endpoint) > MaxEndpointLen {
		return fmt.Errorf("endpoint is over %d bytes", MaxEndpointLen)
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return errors.New("endpoint is not an absolute URL with a host")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		ip := net.ParseIP(host)
		if allowInsecure && (host == "localhost" || (ip != nil && ip.IsLoopback())) {
			return nil
		}
		return errors.New("endpoint must be https")
	}
	return errors.New("endpoint must be https")
}
