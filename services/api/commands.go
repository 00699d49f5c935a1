package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator"
)

type cancelBody struct {
	Reason string `json:"reason"`
}

type extendBody struct {
	Until string `json:"until"`
	By    string `json:"by"`
}

type claimBody struct {
	ClaimID string `json:"claim_id"`
}

// commandRefusal is why the caller may not give command on rec (the one
// rule the arbiter applies too, approval.CommandRefusal), or "".
func commandRefusal(p *Principal, rec *contracts.Record, command string) string {
	return approval.CommandRefusal(nil, rec, command, issuer(p))
}

// sendCommand publishes cmd (Nats-Msg-Id = command id) and waits for the
// arbiter's answer as judged by match; it writes the answer.
func (s *Server) sendCommand(w http.ResponseWriter, r *http.Request, cmd contracts.Command, match func(*contracts.Record) (bool, *Error)) {
	var refused *Error
	rec, rev, done, err := s.publishAndWatch(r.Context(), cmd.EventID, func(ctx context.Context) error {
		if cmd.Command == contracts.CommandClaim {
			return s.cfg.Gate.SendClaim(ctx, cmd) // by request when the arbiter answers
		}
		_, err := events.Publish(ctx, s.cfg.JS, contracts.CommandSubject(cmd.EventID), cmd, cmd.CommandID, nil)
		return err
	}, func(rec *contracts.Record) bool {
		ok, aerr := match(rec)
		if ok {
			refused = aerr
		}
		return ok
	})
	if err != nil {
		writeError(w, s.backendError("publish command", err))
		return
	}
	p := principalFrom(r.Context())
	s.log.Info("command", "event_id", cmd.EventID, "command", cmd.Command, "command_id", cmd.CommandID, "by", cmd.By, "token_name", p.Name)
	switch {
	case !done:
		writeJSON(w, http.StatusAccepted, inFlightAnswer{Status: "in_flight", CommandID: cmd.CommandID})
	case refused != nil:
		writeError(w, refused)
	case cmd.Command == contracts.CommandClaim:
		// The claimant's answer carries the receipt its claim got.
		writeJSON(w, http.StatusOK, recordAnswer{Record: s.withReceipt(r.Context(), s.shown(rec, p), p, orchestrator.ReceiptWait), Revision: rev})
	default:
		writeJSON(w, http.StatusOK, recordAnswer{Record: s.shown(rec, p), Revision: rev})
	}
}

func (s *Server) newCommand(id, kind string, p *Principal) contracts.Command {
	return contracts.Command{
		Spec: contracts.SpecCommand, CommandID: uuid.Must(uuid.NewV7()).String(), EventID: id, Command: kind,
		By: p.Subject, IssuedAt: s.cfg.Now().UTC(),
	}
}

// commandTarget reads the event id and the record a command is about, and
// decodes the body. It writes the error and returns nil on failure.
func (s *Server) commandTarget(w http.ResponseWriter, r *http.Request, body any) (string, *contracts.Record, uint64) {
	id, aerr := eventIDParam(r)
	if aerr != nil {
		writeError(w, aerr)
		return "", nil, 0
	}
	if aerr := decodeBody(w, r, body, true); aerr != nil {
		writeError(w, aerr)
		return "", nil, 0
	}
	rec, rev, aerr := s.readableRecordSoon(r.Context(), principalFrom(r.Context()), id, unknownEventWait)
	if aerr != nil {
		writeError(w, aerr)
		return "", nil, 0
	}
	return id, rec, rev
}

// postCancel answers POST /v1/approvals/{event_id}/cancel.
func (s *Server) postCancel(w http.ResponseWriter, r *http.Request) {
	var body cancelBody
	id, rec, _ := s.commandTarget(w, r, &body)
	if rec == nil {
		return
	}
	p := principalFrom(r.Context())
	if !s.manageable(w, p, rec, contracts.CommandCancel) {
		return
	}
	cmd := s.newCommand(id, contracts.CommandCancel, p)
	if body.Reason != "" {
		s.log.Info("cancel reason", "event_id", id, "command_id", cmd.CommandID, "reason", body.Reason)
	}
	s.sendCommand(w, r, cmd, func(rec *contracts.Record) (bool, *Error) {
		if !rec.Terminal() {
			return false, nil
		}
		if rec.Status == contracts.StatusCancelled && rec.Outcome != nil && rec.Outcome.Reason == "cancel:"+cmd.CommandID {
			return true, nil
		}
		return true, refusal(contracts.ReasonClosed)
	})
}

// postExtend answers POST /v1/approvals/{event_id}/extend: {until} sets
// the deadline, {by} moves it later by a duration.
func (s *Server) postExtend(w http.ResponseWriter, r *http.Request) {
	var body extendBody
	id, rec, rev := s.commandTarget(w, r, &body)
	if rec == nil {
		return
	}
	bad := func(field, format string, args ...any) {
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidField, field, format, args...))
	}
	var until time.Time
	switch {
	case (body.Until == "") == (body.By == ""):
		bad("until", "give exactly one of until (RFC 3339 time) or by (duration such as 2h)")
		return
	case body.Until != "":
		t, err := time.Parse(time.RFC3339, body.Until)
		if err != nil {
			bad("until", "until must be an RFC 3339 time such as 2030-01-02T15:04:05Z")
			return
		}
		until = t.UTC()
	default:
		d, err := time.ParseDuration(body.By)
		if err != nil || d <= 0 {
			bad("by", "by must be a positive duration such as 2h or 30m")
			return
		}
		until = rec.ExpiresAt.Add(d).UTC()
	}
	if !until.After(s.cfg.Now()) {
		bad("until", "the new deadline must be in the future")
		return
	}
	p := principalFrom(r.Context())
	if !s.manageable(w, p, rec, contracts.CommandExtend) {
		return
	}
	if until.Equal(rec.ExpiresAt) {
		writeJSON(w, http.StatusOK, recordAnswer{Record: rec, Revision: rev})
		return
	}
	if !until.After(rec.ExpiresAt) {
		e := refusal(contracts.ReasonDeadlineNotLater)
		e.Field = "until"
		e.Message = fmt.Sprintf("an extension moves the deadline later, and %s is before the deadline %s",
			until.Format(time.RFC3339), rec.ExpiresAt.UTC().Format(time.RFC3339))
		writeError(w, e)
		return
	}
	before := rec.ExpiresAt
	cmd := s.newCommand(id, contracts.CommandExtend, p)
	cmd.Until = until
	s.sendCommand(w, r, cmd, func(rec *contracts.Record) (bool, *Error) {
		switch {
		case rec.Terminal():
			return true, refusal(contracts.ReasonClosed)
		case !rec.ExpiresAt.Equal(before):
			return true, nil
		}
		return false, nil
	})
}

// postClaim answers POST /v1/approvals/{event_id}/claim: it succeeds once
// per approval (and again for a retry with the same claim_id).
func (s *Server) postClaim(w http.ResponseWriter, r *http.Request) {
	var body claimBody
	id, rec, rev := s.commandTarget(w, r, &body)
	if rec == nil {
		return
	}
	if body.ClaimID != "" && !validClientID(body.ClaimID) {
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidField, "claim_id",
			"claim_id must be 1 to %d characters of A-Z, a-z, 0-9 and - _ . :", maxClientID))
		return
	}
	claimID := body.ClaimID
	if claimID == "" {
		claimID = uuid.Must(uuid.NewV7()).String()
	}
	if c := rec.Claim; c != nil {
		// The same claim again (a retry, its answer lost) is answered as it
		// was to whoever may claim this request (its submitting agent, an
		// admin), with the receipt when it is theirs; anyone else learns it
		// is taken. Who may claim is the rule, not a read of the receipt,
		// which a store that is away for a moment would turn into a
		// refusal of the claimant's own retry.
		p := principalFrom(r.Context())
		if c.ClaimID == claimID && commandRefusal(p, rec, contracts.CommandClaim) == "" {
			writeJSON(w, http.StatusOK, recordAnswer{Record: s.withReceipt(r.Context(), s.shown(rec, p), p, orchestrator.ReceiptWait), Revision: rev})
		} else {
			writeError(w, claimedRefusal(c))
		}
		return
	}
	if rec.Status != contracts.StatusApproved {
		writeError(w, refusal(contracts.ReasonNotApproved))
		return
	}
	p := principalFrom(r.Context())
	if reason := commandRefusal(p, rec, contracts.CommandClaim); reason != "" {
		e := refusal(reason)
		e.Message = "only the agent token that submitted this request (or an admin) may claim it"
		writeError(w, e)
		return
	}
	if rec.LapsedAt != nil {
		writeError(w, lapsedRefusal(rec))
		return
	}
	cmd := s.newCommand(id, contracts.CommandClaim, p)
	cmd.CommandID, cmd.ClaimID = claimID, claimID
	s.sendCommand(w, r, cmd, func(rec *contracts.Record) (bool, *Error) {
		switch {
		case rec.Claim != nil && rec.Claim.ClaimID == claimID:
			return true, nil
		case rec.Claim != nil:
			return true, claimedRefusal(rec.Claim)
		case rec.Status != contracts.StatusApproved:
			return true, refusal(contracts.ReasonNotApproved)
		case rec.LapsedAt != nil:
			return true, lapsedRefusal(rec)
		}
		return false, nil
	})
}

// lapsedRefusal refuses a claim of an approval that lapsed, saying when
// it was decided and how long it could be claimed.
func lapsedRefusal(rec *contracts.Record) *Error {
	e := refusal(contracts.ReasonApprovalLapsed)
	e.Message = fmt.Sprintf("this approval was decided at %s and could be claimed for %s; it lapsed, the call was not run, and it needs a new decision (propose it again under a new tool call id)",
		rec.Outcome.DecidedAt.UTC().Format(time.RFC3339), approval.ClaimWithin(&rec.Request))
	return e
}

// claimedRefusal refuses a claim of an approval claimed before, saying
// what Countersign knows: when and by which claim. Whether the tool call
// then ran, and how it ended, Countersign cannot know (a runner may die
// right after claiming); the call must not run again either way.
func claimedRefusal(c *contracts.Claim) *Error {
	e := refusal(contracts.ReasonAlreadyClaimed)
	e.Message = fmt.Sprintf("this approval was already claimed at %s by claim %s; the outcome of the tool call is unknown to Countersign, and the call must not run again",
		c.At.UTC().Format(time.RFC3339), c.ClaimID)
	return e
}

// manageable answers the refusal and returns false unless p may cancel or
// extend rec and rec is still pending.
func (s *Server) manageable(w http.ResponseWriter, p *Principal, rec *contracts.Record, command string) bool {
	if reason := commandRefusal(p, rec, command); reason != "" {
		writeError(w, refusal(reason))
		return false
	}
	if rec.Terminal() {
		writeError(w, refusal(contracts.ReasonClosed))
		return false
	}
	return true
}
