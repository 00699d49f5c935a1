package orchestrator

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// Claims are first asked of the arbiter by NATS request
// (contracts.ClaimSubject): it applies the command at once and nothing but
// the record and its announcement is stored. When the request is not
// answered as handled (no arbiter answers claim requests, a refused grant,
// a timeout, an error), the same command goes to the command subject,
// where HITL_RESOLUTIONS keeps it until the arbiter applies it; both apply
// it once, by its claim id.
const (
	// claimRequestWait bounds one claim request.
	claimRequestWait = 2 * time.Second
	// claimRequestPause is how long a gate publishes its claims on the
	// command subject at once after a request went unanswered (an arbiter
	// of an earlier release, or a connection without the grant).
	claimRequestPause = time.Minute
)

// claimPath remembers whether claim requests are worth trying.
type claimPath struct {
	pausedUntil atomic.Int64 // Unix ns
}

// SendClaim has the arbiter apply cmd, a claim command: by request, or
// else through the command subject (see contracts.SubjectClaimPrefix). It
// returns once the arbiter answered it handled the claim, or once the
// command is stored; the record tells whether the claim was accepted. The
// HTTP API's claims take this way; a Permit's Claim does too.
func (g *Gate) SendClaim(ctx context.Context, cmd contracts.Command) error {
	data, err := claimData(cmd)
	if err != nil {
		return err
	}
	if handled, err := g.askClaim(ctx, cmd.EventID, data); handled || err != nil {
		return err
	}
	return g.publishClaim(ctx, cmd, data)
}

// claimData checks that cmd is a claim command and encodes it.
func claimData(cmd contracts.Command) ([]byte, error) {
	if cmd.Command != contracts.CommandClaim || cmd.EventID == "" || cmd.ClaimID == "" {
		return nil, errors.New("orchestrator: SendClaim takes a claim command with an event id and a claim id")
	}
	return contracts.Marshal(cmd)
}

// askClaim asks the arbiter by request to apply data, the encoding of a
// claim command for eventID, and reports whether it answered that it did:
// the claimed (or refusing) record is stored then. Not handled with a nil
// error, the claim is to go through the command subject (publishClaim).
func (g *Gate) askClaim(ctx context.Context, eventID string, data []byte) (handled bool, err error) {
	now := g.cfg.Now()
	if now.UnixNano() < g.claims.pausedUntil.Load() {
		return false, nil
	}
	handled, err = g.requestClaim(ctx, eventID, data)
	if handled || ctx.Err() != nil {
		return handled, err
	}
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		g.claims.pausedUntil.Store(now.Add(claimRequestPause).UnixNano())
	}
	g.cfg.Logger.Debug("claim request not handled; publishing the claim command", "event_id", eventID, "err", err)
	return false, nil
}

// publishClaim stores data, the encoding of the claim command cmd, on the
// command subject, for the arbiter to apply.
func (g *Gate) publishClaim(ctx context.Context, cmd contracts.Command, data []byte) error {
	_, err := events.PublishRaw(ctx, g.cfg.JS, contracts.CommandSubject(cmd.EventID), data, "claim:"+cmd.ClaimID, nil)
	return err
}

// requestClaim asks the arbiter to apply a claim command; handled reports
// that it answered it was applied (accepted or refused).
func (g *Gate) requestClaim(ctx context.Context, eventID string, data []byte) (handled bool, err error) {
	msg := nats.NewMsg(contracts.ClaimSubject(eventID))
	msg.Data = data
	if tp := contracts.TraceparentFrom(ctx); tp != "" {
		msg.Header.Set(events.HeaderTraceparent, contracts.ChildTraceparent(tp))
	}
	rctx, cancel := context.WithTimeout(ctx, claimRequestWait)
	defer cancel()
	reply, err := g.cfg.JS.Conn().RequestMsgWithContext(rctx, msg)
	if err != nil {
		return false, err
	}
	if code := reply.Header.Get(contracts.HeaderClaimError); code != "" {
		return false, errors.New(code + ": " + reply.Header.Get(contracts.HeaderClaimErrorMessage))
	}
	return true, nil
}
