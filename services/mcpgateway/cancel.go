package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
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

// CancelOverHTTP returns a Config.Cancel that cancels an approval with POST
// /v1/approvals/{event_id}/cancel on the API at baseURL, with token (the
// gateway's agent token, the one its reviews are submitted with: the API
// lets the agent that submitted a request cancel it). hc sends the
// requests (nil: http.DefaultClient). Network failures and 502, 503 and
// 504 are tried again until ctx ends; a refusal is an *client.Error with
// the API's code (client.ErrClosed: the approval was decided already). A
// cancellation the arbiter has not applied within the API's wait (202) is
// durable and counts as done.
func CancelOverHTTP(baseURL, token string, hc *http.Client) func(ctx context.Context, eventID, reason string) error {
	if hc == nil {
		hc = http.DefaultClient
	}
	base := strings.TrimRight(baseURL, "/")
	return func(ctx context.Context, eventID, reason string) error {
		body, err := json.Marshal(map[string]string{"reason": reason})
		if err != nil {
			return err
		}
		backoff := 100 * time.Millisecond
		for {
			err := cancelOnce(ctx, hc, base+"/v1/approvals/"+url.PathEscape(eventID)+"/cancel", token, body)
			var apiErr *client.Error
			transient := err != nil && (!errors.As(err, &apiErr) ||
				apiErr.Status == http.StatusBadGateway || apiErr.Status == http.StatusServiceUnavailable || apiErr.Status == http.StatusGatewayTimeout)
			if !transient || ctx.Err() != nil {
				return err
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			case <-t.C:
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

func cancelOnce(ctx context.Context, hc *http.Client, endpoint, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cancel approval: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	apiErr := &client.Error{Status: resp.StatusCode}
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &env) == nil && env.Error.Code != "" {
		apiErr.Code, apiErr.Message, apiErr.Field = env.Error.Code, env.Error.Message, env.Error.Field
	} else {
		apiErr.Code, apiErr.Message = fmt.Sprintf("http_%d", resp.StatusCode), strings.TrimSpace(string(data))
	}
	return apiErr
}
