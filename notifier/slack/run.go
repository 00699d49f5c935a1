package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// "Approve all of run …": one click approves every pending call of the
// clicked request's run (of its agent) that the clicker may decide. The
// votes are cast through notifier.Resolver.DecideRun, by the rules of
// POST /v1/votes with run_id; each is applied by the arbiter on its own
// approval. The clicked message then lists what came of each vote.

// runBatchID is the batch vote id of a click: derived from what Slack sends
// again, byte for byte, when it retries the same interaction (the clicker,
// the message, the action's time and the trigger), so a retried click casts
// the same votes and publishes nothing new.
func runBatchID(p *payload, act payloadAction) string {
	channel, ts := p.channelTS()
	sum := sha256.Sum256([]byte(p.Team.ID + "\n" + p.User.ID + "\n" + channel + "\n" + ts + "\n" +
		act.ActionID + "\n" + act.ActionTS + "\n" + p.TriggerID))
	return "slack-run-" + hex.EncodeToString(sum[:16])
}

// approveRun casts an "Approve all of run" click's votes and shows the
// results on the clicked message (chat.update; through the response URL
// when the payload does not say which message it was).
func (h *Interactions) approveRun(ctx context.Context, log *slog.Logger, p *payload, act payloadAction, eventID, approver string) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.RunTimeout)
	defer cancel()
	rec, err := h.cfg.Resolver.Record(ctx, eventID)
	switch {
	case errors.Is(err, notifier.ErrUnknownEvent):
		h.ephemeral(ctx, p.ResponseURL, "Nothing was approved: "+contracts.Reason(contracts.ReasonUnknownEvent).Message()+".")
		return
	case err != nil || rec == nil:
		log.Error("slack: cannot read the record of a run click", attrError, err)
		h.ephemeral(ctx, p.ResponseURL, textVoteFailed)
		return
	}
	run := rec.Request.Run
	v := h.newVote("", approver)
	v.VoteID, v.Decision = runBatchID(p, act), contracts.DecisionApprove
	v.Comment = "Approved in Slack with all of run " + run.ID
	dec, err := h.cfg.Resolver.DecideRun(ctx, run.ID, run.Agent, v)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("slack run approval not confirmed in time", attrError, err)
		h.ephemeral(ctx, p.ResponseURL, textVoteUnsure)
		return
	case err != nil:
		log.Error("slack run approval failed", attrError, err)
		h.ephemeral(ctx, p.ResponseURL, textVoteFailed)
		return
	}
	counted, refused, inFlight := dec.Counts()
	log.Info("slack run approval", "run_id", run.ID, "vote_id", v.VoteID, "counted", counted, "refused", refused, "in_flight", inFlight)
	// The clicked message shows its own approval as it is now, with the
	// results under it.
	if now, err := h.cfg.Resolver.Record(ctx, eventID); err == nil && now != nil {
		rec = now
	}
	opts := h.opts
	opts.RunResults = &RunResults{By: approver, RunID: run.ID, Decision: dec}
	msg := RequestMessage(&rec.Request, rec, opts)
	channel, ts := p.channelTS()
	h.updateOriginal(ctx, log, modalMeta{Channel: channel, TS: ts, ResponseURL: p.ResponseURL}, msg)
}
