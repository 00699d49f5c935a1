package api

import (
	"net/http"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// outcomeBody is the body of POST /v1/approvals/{event_id}/outcome.
type outcomeBody struct {
	// CommandID makes a retried report one report (default: a new id).
	CommandID    string `json:"command_id"`
	Status       string `json:"status"`
	Summary      string `json:"summary"`
	ResultSHA256 string `json:"result_sha256"`
}

// postOutcome answers POST /v1/approvals/{event_id}/outcome: the claimant
// reports how the call ended, once.
func (s *Server) postOutcome(w http.ResponseWriter, r *http.Request) {
	var body outcomeBody
	id, rec, rev := s.commandTarget(w, r, &body)
	if rec == nil {
		return
	}
	p := principalFrom(r.Context())
	cmd := s.newCommand(id, contracts.CommandOutcome, p)
	if body.CommandID != "" {
		if !validClientID(body.CommandID) {
			writeError(w, fieldError(http.StatusBadRequest, CodeInvalidField, "command_id",
				"command_id must be 1 to %d characters of A-Z, a-z, 0-9 and - _ . :", maxClientID))
			return
		}
		cmd.CommandID = body.CommandID
	}
	cmd.Status, cmd.Summary, cmd.ResultSHA256 = body.Status, body.Summary, body.ResultSHA256
	if e := contracts.CheckCommandFields(&cmd); e != nil {
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidField, e.Field, "%s", e.Message))
		return
	}
	if x := rec.Execution; x != nil {
		if x.CommandID == cmd.CommandID && approval.OutcomeRefusal(nil, rec, issuer(p)) == "" {
			writeJSON(w, http.StatusOK, recordAnswer{Record: s.shown(rec, p), Revision: rev})
		} else {
			writeError(w, refusal(contracts.ReasonOutcomeReported))
		}
		return
	}
	if reason := approval.OutcomeRefusal(nil, rec, issuer(p)); reason != "" {
		e := refusal(reason)
		if reason == contracts.ReasonNotPermitted {
			e.Message = "only whoever claimed this approval may report how the call ended"
		}
		writeError(w, e)
		return
	}
	s.sendCommand(w, r, cmd, func(rec *contracts.Record) (bool, *Error) {
		switch {
		case rec.Execution != nil && rec.Execution.CommandID == cmd.CommandID:
			return true, nil
		case rec.Execution != nil:
			return true, refusal(contracts.ReasonOutcomeReported)
		}
		return false, nil
	})
}
