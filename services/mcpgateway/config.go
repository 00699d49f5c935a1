package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts/client"
)

// Defaults of Config.
const (
	DefaultAgent         = "mcp"
	DefaultMaxWait       = 50 * time.Second
	DefaultProgressEvery = 5 * time.Second
	DefaultMaxArguments  = 256 << 10
	DefaultInputWait     = 10 * time.Minute
)

// How often a gateway started without its upstream (Config.ConnectLater)
// tries to reach it: after ReconnectMin, doubling up to ReconnectMax.
const (
	ReconnectMin = 500 * time.Millisecond
	ReconnectMax = 30 * time.Second
)

// Dialer connects to the upstream MCP server with the given client and
// returns the session. It is called once per client session of the gateway
// (and again after the upstream went away).
type Dialer func(ctx context.Context, c *mcp.Client) (*mcp.ClientSession, error)

// Config configures a Gateway.
type Config struct {
	// Name is the upstream server's name: tools are reviewed as
	// "<Name>.<tool>" (required; letters, digits, '_' and '-').
	Name string
	// Dial connects to the upstream (required).
	Dial Dialer
	// Countersign reviews, waits for and claims the calls (required).
	Countersign *client.Client
	// Agent is the agent name of every review (default "mcp").
	Agent string
	// RunID is the run identity of calls that come without a caller
	// (stdio). It must be stable across restarts of the gateway for calls
	// to re-attach; the caller of an HTTP session replaces it.
	RunID string
	// RequestedBy names the person the calls are made for, when the
	// transport does not say (stdio).
	RequestedBy string
	// Tenant is the run's tenant (optional).
	Tenant string
	// Labels are added to every review's run labels.
	Labels map[string]string
	// MaxWait is how long one tools/call waits for a human before it answers
	// that the call awaits approval (default 50 s).
	MaxWait time.Duration
	// ProgressEvery is how often a waiting call sends a progress
	// notification (default 5 s).
	ProgressEvery time.Duration
	// MaxArguments bounds a call's arguments in bytes (default 256 KiB).
	MaxArguments int
	// InputWait is how long a question the upstream asks in the middle of
	// a call waits for the client's answer when the client answers by
	// calling again (protocol 2026-07-28 and later; default 10 min). A
	// question not answered in time is cancelled.
	InputWait time.Duration
	// Receipts says the upstream wants a receipt with every call: each
	// forwarded call carries the receipt Countersign signed for it in
	// _meta["countersign/receipt"], and a call Countersign gives no
	// receipt for (a policy rule without receipt: true, an API without a
	// signing key) is refused, not forwarded. Either way the gateway
	// forwards no receipt a client put there.
	Receipts bool
	// Cancel cancels an approval the gateway opened, as the agent that
	// submitted it, when the client cancels the call that waits on it (an
	// MCP notifications/cancelled; DESIGN §5): POST
	// /v1/approvals/{event_id}/cancel with the gateway's agent token, as
	// CancelOverHTTP does. A client that disconnects, or a wait that merely
	// ends, cancels nothing. Without Cancel the approval of a cancelled
	// call stays pending (the gateway only stops re-attaching to it) and a
	// warning is logged.
	Cancel func(ctx context.Context, eventID, reason string) error
	// ConnectLater lets New succeed while the upstream cannot be reached:
	// the gateway serves its clients without it — their requests get an
	// error that names the upstream and says it cannot be reached — tries
	// again in the background (ReconnectMin doubling to ReconnectMax), and
	// on every request, and serves the upstream once it answers (see
	// Gateway.Health). Without it, New fails.
	ConnectLater bool
	// Logger (default: slog.Default()).
	Logger *slog.Logger
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (c *Config) setDefaults() {
	if c.Agent == "" {
		c.Agent = DefaultAgent
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = DefaultProgressEvery
	}
	if c.MaxArguments == 0 {
		c.MaxArguments = DefaultMaxArguments
	}
	if c.InputWait == 0 {
		c.InputWait = DefaultInputWait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	var errs []error
	if !namePattern.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("Name: %q must be 1 to 64 letters, digits, '_' or '-'", c.Name))
	}
	if c.Dial == nil {
		errs = append(errs, errors.New("Dial: required"))
	}
	if c.Countersign == nil {
		errs = append(errs, errors.New("Countersign: required"))
	}
	if c.RunID == "" {
		errs = append(errs, errors.New("RunID: required (a run identity stable across restarts)"))
	}
	if c.MaxWait < 0 {
		errs = append(errs, errors.New("MaxWait: must not be negative"))
	}
	if c.ProgressEvery <= 0 {
		errs = append(errs, errors.New("ProgressEvery: must be positive"))
	}
	if c.InputWait < 0 {
		errs = append(errs, errors.New("InputWait: must not be negative"))
	}
	if c.MaxArguments < 0 {
		errs = append(errs, errors.New("MaxArguments: must not be negative"))
	}
	return errors.Join(errs...)
}
