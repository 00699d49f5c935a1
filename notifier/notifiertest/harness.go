package notifiertest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier"
)

// Harness tells the suite how to run one channel.
type Harness struct {
	// New builds the channel under test against a fresh receiving side,
	// wired with env. It is called once per behaviour; what it starts is
	// stopped with t.Cleanup.
	New func(t *testing.T, env Env) Setup
	// Links is true for a channel that shows people where to act: a
	// request's delivery then links under Env.PublicURL, and an outcome's
	// to the approval's page (notifier.ApprovalURL). A channel that sends
	// machine-readable events (webhooks) leaves it false.
	Links bool
}

// Env is what the suite gives the channel it builds.
type Env struct {
	// Now is the channel's clock; receipts are dated by it.
	Now func() time.Time
	// Logger receives the channel's logs, at every level.
	Logger *slog.Logger
	// PublicURL is the base URL of the Countersign server that links point
	// under.
	PublicURL string
}

// Setup is one channel under test and its receiving side.
type Setup struct {
	// Channel is the channel under test.
	Channel notifier.Channel
	// Targets are two different destinations the receiving side accepts,
	// each with Channel set to the channel's name.
	Targets [2]notifier.Target
	// Unknown is a destination the channel can never deliver to (an
	// address that does not exist or cannot be one).
	Unknown notifier.Target
	// Received returns every delivery the receiving side has accepted so
	// far, oldest first. Refused attempts are not deliveries.
	Received func() []Delivery
	// Fail makes the receiving side refuse the next new message (Notify,
	// or Update without a Ref): permanently (a refusal no retry can
	// change, such as an unknown mailbox or an HTTP 4xx) or transiently (a
	// refusal that asks to try again later, such as an SMTP 4xx or an HTTP
	// 503).
	Fail func(permanent bool)
	// Stop makes the receiving side unreachable for good.
	Stop func()
	// Secrets are the channel's credentials (tokens, passwords, signing
	// keys, secret parts of URLs), none of which may show in a delivery's
	// content, an error, a receipt or a log line. At least one is required.
	Secrets []string
}

// Delivery is one message as the receiving side accepted it.
type Delivery struct {
	// To is the destination the receiving side saw, written as a
	// notifier.Target Address.
	To string
	// Key is what the receiving side tells duplicates apart by: deliveries
	// with one Key are one notification, kept once (a webhook-id, an email
	// Message-ID). Where the medium has no such key, each message is its
	// own (a Slack message's ref), so only a message written once is kept
	// once.
	Key string
	// Thread is what the delivery belongs to on the receiving side: the
	// message it replaces or replies to, else itself (a Slack message's
	// ref, an email thread's first Message-ID); a medium without threads
	// uses the approval's event id.
	Thread string
	// Content is everything the delivery shows a person or a program,
	// decoded to text: headers and body.
	Content string
}
