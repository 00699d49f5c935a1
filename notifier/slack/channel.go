package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	slackgo "github.com/slack-go/slack"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// DefaultHTTPTimeout bounds one Web API call when Config.HTTPClient is nil.
const DefaultHTTPTimeout = 10 * time.Second

// Config wires a Channel.
type Config struct {
	// BotToken is the bot's OAuth token (xoxb-…), with the chat:write
	// scope. Required. It is never logged nor put in an error.
	BotToken string
	// APIURL is the base of the Web API (default DefaultAPIURL); tests
	// point it at slacktest.
	APIURL string
	// PublicURL is the base URL of the Countersign web inbox; when set,
	// messages carry an "Open in Countersign" link.
	PublicURL string
	// HTTPClient makes the calls (default: a client with
	// DefaultHTTPTimeout).
	HTTPClient *http.Client
	// Now is the clock (default time.Now); it dates receipts.
	Now func() time.Time
	// Logger defaults to discarding.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	commonDefaults(&c.APIURL, &c.HTTPClient, &c.Now, &c.Logger)
}

// commonDefaults fills the settings a Channel and the interactions handler
// share: the Web API base, the HTTP client, the clock and the logger.
func commonDefaults(apiURL *string, client **http.Client, now *func() time.Time, logger **slog.Logger) {
	if *apiURL == "" {
		*apiURL = DefaultAPIURL
	}
	*apiURL = apiBase(*apiURL)
	if *client == nil {
		*client = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if *now == nil {
		*now = time.Now
	}
	if *logger == nil {
		*logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	return errors.Join(validateWebAPI("Config", c.BotToken, c.APIURL, c.PublicURL)...)
}

// validateWebAPI checks the settings every Web API client needs; what
// names the configuration type in the errors.
func validateWebAPI(what, botToken, apiURL, publicURL string) []error {
	var errs []error
	if botToken == "" {
		errs = append(errs, fmt.Errorf("slack: %s.BotToken: required", what))
	}
	if !validAPIURL(apiURL) {
		errs = append(errs, fmt.Errorf("slack: %s.APIURL: want an absolute http or https URL", what))
	}
	if publicURL != "" && !validAPIURL(publicURL) {
		errs = append(errs, fmt.Errorf("slack: %s.PublicURL: want an absolute http or https URL", what))
	}
	return errs
}

// Channel delivers notifications as Slack messages; see the package
// documentation. It is safe for concurrent use.
type Channel struct {
	api       *apiClient
	publicURL string
	now       func() time.Time
	log       *slog.Logger
	sent      *sentCache
}

var _ notifier.Channel = (*Channel)(nil)

// New returns a Channel for cfg.
func New(cfg Config) (*Channel, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Channel{
		api:       &apiClient{base: cfg.APIURL, token: cfg.BotToken, http: cfg.HTTPClient, now: cfg.Now},
		publicURL: cfg.PublicURL,
		now:       cfg.Now,
		log:       cfg.Logger,
		sent:      newSentCache(sentCacheSize),
	}, nil
}

// Name is contracts.ChannelSlack.
func (c *Channel) Name() string { return contracts.ChannelSlack }

// Notify posts the pending request n.Request to n.Target.Address (for
// notifier.KindHeld, the line that more requests wait in the inbox, and
// nothing of any request): a
// conversation id (C…, G…, D…), a user id (U…, W…) for a direct message, or
// "#name". The receipt's Ref is "<conversation id>/<message ts>".
//
// A notification already delivered by this Channel (same idempotency key)
// is not posted again: its first receipt's Ref is returned. On failure
// Notify returns the failed receipt and an error wrapping
// notifier.ErrPermanent when a retry cannot help (bad token, unknown
// channel, a message Slack refuses), carrying notifier.RetryAfter when
// rate-limited, and transient otherwise.
func (c *Channel) Notify(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if n.Kind == notifier.KindHeld {
		if n.Target.Address == "" {
			return c.fail(n, fmt.Errorf("%w: slack: no destination", notifier.ErrPermanent))
		}
		msg := heldMessage(n.HeldUntil, c.publicURL)
		return c.deliver(ctx, n, func() (string, error) { return c.post(ctx, n.Target.Address, msg) })
	}
	reminder := strings.HasPrefix(n.Kind, "reminder.")
	if n.Kind != notifier.KindRequested && !reminder && !strings.HasPrefix(n.Kind, "escalation.") {
		return c.fail(n, fmt.Errorf("%w: slack: Notify cannot deliver kind %q", notifier.ErrPermanent, n.Kind))
	}
	if n.Target.Address == "" {
		return c.fail(n, fmt.Errorf("%w: slack: no destination", notifier.ErrPermanent))
	}
	if channel, ts, ok := ParseRef(n.Ref); ok && reminder {
		// A reminder of a message already shown goes in its thread, also
		// sent to the conversation; the buttons stay on the one message the
		// outcome will update.
		msg := reminderMessage(&n.Request, n.Record, c.publicURL)
		return c.deliver(ctx, n, func() (string, error) {
			r, err := c.api.call(ctx, "chat.postMessage", postMessageArgs{Channel: channel, Text: msg.Text, Blocks: msg.Blocks,
				ThreadTS: ts, ReplyBroadcast: true})
			if err != nil {
				return "", err
			}
			return refOf(r, "chat.postMessage")
		})
	}
	msg := RequestMessage(&n.Request, nil, RenderOptions{
		PublicURL: c.publicURL,
		Reminder:  reminder,
	})
	return c.deliver(ctx, n, func() (string, error) { return c.post(ctx, n.Target.Address, msg) })
}

// Update shows the outcome n.Record, which must be terminal (a pending
// record is a permanent error). With n.Ref "<conversation id>/<ts>" it
// replaces that message (chat.update), removing its buttons; without a
// usable Ref, or when the message is gone, it posts the outcome as a new
// message to n.Target.Address. The receipt's Ref is the message's
// "<conversation id>/<ts>". Errors are as for Notify.
func (c *Channel) Update(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if n.Kind != notifier.KindDecided {
		return c.fail(n, fmt.Errorf("%w: slack: Update cannot deliver kind %q", notifier.ErrPermanent, n.Kind))
	}
	if n.Record == nil || !n.Record.Terminal() {
		return c.fail(n, fmt.Errorf("%w: slack: Update needs a terminal record", notifier.ErrPermanent))
	}
	msg := OutcomeMessage(n.Record, RenderOptions{PublicURL: c.publicURL})
	return c.deliver(ctx, n, func() (string, error) {
		if channel, ts, ok := ParseRef(n.Ref); ok {
			ref, err := c.update(ctx, channel, ts, msg)
			var apiErr *APIError
			if !errors.As(err, &apiErr) || (apiErr.Code != "message_not_found" && apiErr.Code != "cant_update_message" && apiErr.Code != "edit_window_closed") {
				return ref, err
			}
			c.log.Info("slack message cannot be updated; posting the outcome", attrEvent, n.EventID(), attrError, apiErr.Code)
		} else if n.Ref != "" {
			c.log.Warn("slack ref is not <channel>/<ts>; posting the outcome", attrEvent, n.EventID())
		}
		if n.Target.Address == "" {
			return "", fmt.Errorf("%w: slack: no destination", notifier.ErrPermanent)
		}
		return c.post(ctx, n.Target.Address, msg)
	})
}

// deliver runs send once per idempotency key and makes the receipt.
func (c *Channel) deliver(ctx context.Context, n notifier.Notification, send func() (string, error)) (notifier.Receipt, error) {
	ref, err := c.sent.do(ctx, n.IdempotencyKey(), send)
	if err != nil {
		return c.fail(n, err)
	}
	return notifier.NewReceipt(n, ref, nil, c.now()), nil
}

func (c *Channel) fail(n notifier.Notification, err error) (notifier.Receipt, error) {
	return notifier.NewReceipt(n, "", err, c.now()), err
}

// post sends msg to channel with chat.postMessage and returns its Ref.
func (c *Channel) post(ctx context.Context, channel string, msg Message) (string, error) {
	return postMessage(ctx, c.api, channel, msg)
}

func (c *Channel) update(ctx context.Context, channel, ts string, msg Message) (string, error) {
	return updateMessage(ctx, c.api, channel, ts, msg)
}

// postMessageArgs are the arguments of chat.postMessage.
type postMessageArgs struct {
	Channel     string          `json:"channel"`
	Text        string          `json:"text"`
	Blocks      []slackgo.Block `json:"blocks"`
	UnfurlLinks bool            `json:"unfurl_links"`
	UnfurlMedia bool            `json:"unfurl_media"`
	// ThreadTS posts the message as a reply in that message's thread;
	// ReplyBroadcast also shows it in the conversation.
	ThreadTS       string `json:"thread_ts,omitempty"`
	ReplyBroadcast bool   `json:"reply_broadcast,omitempty"`
}

// updateArgs are the arguments of chat.update.
type updateArgs struct {
	Channel string          `json:"channel"`
	TS      string          `json:"ts"`
	Text    string          `json:"text"`
	Blocks  []slackgo.Block `json:"blocks"`
}

func postMessage(ctx context.Context, api *apiClient, channel string, msg Message) (string, error) {
	r, err := api.call(ctx, "chat.postMessage", postMessageArgs{Channel: channel, Text: msg.Text, Blocks: msg.Blocks})
	if err != nil {
		return "", err
	}
	return refOf(r, "chat.postMessage")
}

func updateMessage(ctx context.Context, api *apiClient, channel, ts string, msg Message) (string, error) {
	r, err := api.call(ctx, "chat.update", updateArgs{Channel: channel, TS: ts, Text: msg.Text, Blocks: msg.Blocks})
	if err != nil {
		return "", err
	}
	return refOf(r, "chat.update")
}

func refOf(r *reply, method string) (string, error) {
	if r.Channel == "" || r.TS == "" {
		// Slack delivered the message but the reply does not say where;
		// retrying would post it twice.
		return "", fmt.Errorf("%w: slack: %s: the reply has no channel or ts", notifier.ErrPermanent, method)
	}
	return Ref(r.Channel, r.TS), nil
}

// Ref is the receipt ref of the message ts in conversation channel.
func Ref(channel, ts string) string { return channel + "/" + ts }

// ParseRef splits a receipt ref "<conversation id>/<ts>".
func ParseRef(ref string) (channel, ts string, ok bool) {
	channel, ts, ok = strings.Cut(ref, "/")
	if !ok || channel == "" || ts == "" || strings.Contains(ts, "/") {
		return "", "", false
	}
	return channel, ts, true
}
