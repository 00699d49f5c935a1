package mcpgateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// cancelledByClient reports whether ctx, the context of a tools/call
// handler, ended because the client cancelled that request (MCP
// notifications/cancelled) — not because its connection broke or closed.
//
// The SDK (go-sdk v1.8.0, internal/jsonrpc2) cancels a request's context
// without a cause only when the peer's notifications/cancelled names the
// request (its Preempter calls Connection.Cancel). A connection that ends
// cancels the requests in flight with the read or write error as the cause
// (io.EOF for a client that went away), and a session that is closed
// (a gateway shutting down) waits for its handlers instead of cancelling
// them. So a bare context.Canceled is the client's own cancellation.
// TestClientCancelCancelsItsApproval and TestDisconnectLeavesApprovalPending
// hold the SDK to this.
func cancelledByClient(ctx context.Context) bool {
	return ctx.Err() != nil && context.Cause(ctx) == context.Canceled
}

// waiters counts, per approval, the calls of this gateway waiting on it:
// of two identical calls waiting on one approval, the client that cancels
// its own leaves the approval to the other.
type waiters struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *waiters) add(eventID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	w.n[eventID]++
}

func (w *waiters) done(eventID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[eventID]--; w.n[eventID] <= 0 {
		delete(w.n, eventID)
	}
}

func (w *waiters) has(eventID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[eventID] > 0
}

// cancelTimeout bounds the cancellation of an approval, which runs after
// the client's request ended.
const cancelTimeout = 30 * time.Second

// cancelReason is the reason the gateway gives the API for a cancellation.
const cancelReason = "the MCP client cancelled the tools/call (notifications/cancelled)"

// withdraw handles a call whose client cancelled it while the gateway
// reviewed it or waited for its decision: the approval of generation gen
// of the call is cancelled in Countersign, and the gateway never
// re-attaches to it, so the next identical call is a new request — unless
// another call of this gateway still waits on that approval. eventID
// is empty when the cancellation came before the review answered: the
// review is then made again, without the client's context, to learn
// whether it opened an approval (review is idempotent by tool call id).
func (g *Gateway) withdraw(ctx context.Context, log *slog.Logger, run contracts.Run, call client.ToolCall, key string, gen int, eventID string) {
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer stop()
	if eventID == "" {
		res, err := g.review(ctx, run, &call)
		if err != nil {
			log.Warn("the client cancelled the call during its review, which could not be repeated; an approval it opened may stay pending",
				slog.Any("err", err))
			g.book.usedUp(key, gen)
			return
		}
		if res.Verdict != client.Pending || res.EventID == "" {
			if res.EventID != "" {
				g.book.usedUp(key, gen) // decided already: not this call's to run
			}
			return
		}
		eventID = res.EventID
	}
	if g.waiting.has(eventID) {
		return // an identical call of another client waits on it
	}
	g.book.usedUp(key, gen)
	log = log.With(slog.String("event_id", eventID))
	if g.cfg.Cancel == nil {
		log.Warn("the client cancelled the call; its approval stays pending (the gateway has no Cancel) and will not be re-attached to by this gateway")
		return
	}
	switch err := g.cfg.Cancel(ctx, eventID, cancelReason); {
	case err == nil:
		log.Info("the client cancelled the call; its approval was cancelled")
	case errors.Is(err, client.ErrClosed):
		log.Info("the client cancelled the call after its approval was decided; the call was not run", slog.Any("err", err))
	default:
		log.Warn("the client cancelled the call; cancelling its approval failed, it may stay pending", slog.Any("err", err))
	}
}

// CancelOverHTTP returns a Config.Cancel that cancels an approval through
// the API at baseURL with token (the gateway's agent token, the one its
// reviews are submitted with: the API lets the agent that submitted a
// request cancel it); hc sends the requests (nil: http.DefaultClient). See
// client.Client.Cancel for what is retried.
func CancelOverHTTP(baseURL, token string, hc *http.Client) func(ctx context.Context, eventID, reason string) error {
	c, err := client.New(client.Config{URL: baseURL, Token: token, HTTPClient: hc})
	if err != nil {
		return func(context.Context, string, string) error { return err }
	}
	return c.Cancel
}
