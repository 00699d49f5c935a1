package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/history"
	"github.com/countersign/countersign/orchestrator/policy"
)

// requestExtras are what a gated call's request carries beside the
// decision: its event id, the shadow verdicts and the history figures the
// policy read.
type requestExtras struct {
	eventID string
	shadow  []contracts.ShadowVerdict
	history []contracts.HistoryFigure
}

// gateHistory is a gate's window of the history of reviewed calls. A gate
// whose policy reads no history keeps none in memory: it records each call
// (history.Record) and opens a Store only when a policy in force reads the
// history, kept as far back as the longest window that policy reads (a
// later policy that reads further back opens a new one, which reads the
// stream again, and its reviews wait for it as at start).
type gateHistory struct {
	mu sync.Mutex
	// store is the window in use (nil: none opened yet), horizon what it
	// was opened to keep; own whether the gate opened it (not Config.History).
	store   *history.Store
	horizon time.Duration
	own     bool
	// recorded is whether the HITL_HISTORY stream exists: without it no
	// call is recorded, and a history condition errors.
	recorded bool
}

// openHistory takes Config.History when given, else notes whether the
// HITL_HISTORY stream exists; the window itself is opened when a policy
// first reads it (historyFor).
func (g *Gate) openHistory(ctx context.Context) error {
	if g.cfg.History != nil {
		g.hist.store, g.hist.recorded = g.cfg.History, true
		return nil
	}
	_, err := g.cfg.JS.Stream(ctx, contracts.StreamHistory)
	switch {
	case err == nil:
		g.hist.recorded = true
	case errors.Is(err, jetstream.ErrStreamNotFound):
	default:
		return fmt.Errorf("orchestrator: history: %w", err)
	}
	return nil
}

// historyFor is the window of the history for a policy that reads use:
// the one open, or, when use reads the history and none open keeps its
// longest window, a new one (the one it replaces is closed).
func (g *Gate) historyFor(ctx context.Context, use policy.HistoryUse) (*history.Store, error) {
	h := &g.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	if use.Scope == "" || !h.recorded || h.store != nil && (!h.own || h.horizon >= use.Window) {
		return h.store, nil
	}
	horizon := min(max(use.Window, h.horizon), policy.MaxHistoryWindow)
	s, err := history.Open(ctx, history.Config{JS: g.cfg.JS, Logger: g.cfg.Logger, Now: g.cfg.Now, Horizon: horizon})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	if h.store != nil && h.own {
		_ = h.store.Close()
	}
	h.store, h.horizon, h.own = s, horizon, true
	return s, nil
}

// closeHistory closes the window if the gate opened it.
func (g *Gate) closeHistory() error {
	g.hist.mu.Lock()
	defer g.hist.mu.Unlock()
	if g.hist.own && g.hist.store != nil {
		return g.hist.store.Close()
	}
	return nil
}

// decide evaluates the policy for one call, shadow rules included, with
// the history of the calls before it, and records the call in the history
// (see history.Store.Review). It returns the figures the conditions read.
// Where the call cannot be ordered in the history (the bus is down, the
// scope kept changing), the history conditions error and the call gets the
// strictest of the rules it could fall under.
func (g *Gate) decide(ctx context.Context, pol *policy.Policy, in policy.Input, eventID string) (policy.Decision, []policy.ShadowVerdict, []contracts.HistoryFigure) {
	use := pol.HistoryUse()
	call := history.Call{ID: eventID, Tool: in.Tool, Run: in.Run, Arguments: in.Arguments}
	store, err := g.historyFor(ctx, use)
	if err != nil {
		g.cfg.Logger.Warn("orchestrator: the history cannot be opened; history conditions error", "event_id", eventID, "error", err)
	}
	if store == nil {
		d, shadow := pol.EvaluateShadow(context.Background(), in)
		if g.hist.recorded {
			history.Record(g.cfg.JS, g.cfg.Logger, call, historyVerdict(d), g.cfg.Now())
		}
		return d, shadow, nil
	}
	var (
		d      policy.Decision
		shadow []policy.ShadowVerdict
		figs   []contracts.HistoryFigure
	)
	err = store.Review(ctx, call, use, func(h policy.History) string {
		rec := &policy.Recorder{H: h}
		in.History = rec
		d, shadow = pol.EvaluateShadow(context.Background(), in)
		figs = rec.Figures()
		return historyVerdict(d)
	})
	if err != nil {
		g.cfg.Logger.Warn("orchestrator: the call could not be ordered in the history; history conditions error",
			"event_id", eventID, "tool", in.Tool, "error", err)
		in.History = nil
		d, shadow = pol.EvaluateShadow(context.Background(), in)
		figs = nil
	}
	return d, shadow, figs
}

// historyVerdict is how the history records a decision.
func historyVerdict(d policy.Decision) string {
	switch d.Action {
	case policy.ActionAllow:
		return contracts.HistoryAllowed
	case policy.ActionDeny:
		return contracts.HistoryDenied
	}
	return contracts.HistoryGated
}
