package orchestrator

import (
	"context"
	"errors"
	"fmt"

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

// openHistory opens the history of reviewed calls unless Config.History
// gave one; where the stream does not exist, there is none.
func (g *Gate) openHistory(ctx context.Context) error {
	g.history = g.cfg.History
	if g.history != nil {
		return nil
	}
	h, err := history.Open(ctx, history.Config{JS: g.cfg.JS, Logger: g.cfg.Logger, Now: g.cfg.Now})
	switch {
	case err == nil:
		g.history, g.ownHist = h, true
	case errors.Is(err, jetstream.ErrStreamNotFound):
	default:
		return fmt.Errorf("orchestrator: %w", err)
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
	if g.history == nil {
		d, shadow := pol.EvaluateShadow(context.Background(), in)
		return d, shadow, nil
	}
	var (
		d      policy.Decision
		shadow []policy.ShadowVerdict
		figs   []contracts.HistoryFigure
	)
	call := history.Call{ID: eventID, Tool: in.Tool, Run: in.Run, Arguments: in.Arguments}
	err := g.history.Review(ctx, call, pol.HistoryUse(), func(h policy.History) string {
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
