package orchestrator

import (
	"context"
	"errors"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// Claims are first asked of the arbiter by NATS request
// (contracts.ClaimSubject), and stored on the command subject when not
// answered as handled (events.RequestPath); both apply a claim once, by
// its claim id.

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
	handled, why, err := g.claims.Ask(ctx, g.cfg.JS.Conn(), g.cfg.Now(), events.AppliedRequest{
		Subject: contracts.ClaimSubject(eventID), Data: data,
		ErrHeader: contracts.HeaderClaimError, MsgHeader: contracts.HeaderClaimErrorMessage,
	})
	if !handled && err == nil {
		g.cfg.Logger.Debug("claim request not handled; publishing the claim command", "event_id", eventID, "err", why)
	}
	return handled, err
}

// publishClaim stores data, the encoding of the claim command cmd, on the
// command subject, for the arbiter to apply.
func (g *Gate) publishClaim(ctx context.Context, cmd contracts.Command, data []byte) error {
	_, err := events.PublishRaw(ctx, g.cfg.JS, contracts.CommandSubject(cmd.EventID), data, "claim:"+cmd.ClaimID, nil)
	return err
}
