package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// arbiterWait is how long a vote or command waits for the arbiter's answer
// before it is reported in flight.
const arbiterWait = 5 * time.Second

// maxClientID bounds client-chosen ids (vote_id, claim_id).
const maxClientID = contracts.MaxClientIDBytes

type voteBody struct {
	VoteID          string          `json:"vote_id"`
	Decision        string          `json:"decision"`
	Comment         string          `json:"comment"`
	Arguments       json.RawMessage `json:"arguments"`
	ArgumentsSHA256 string          `json:"arguments_sha256"`
	Answer          *answerBody     `json:"answer"`
	Via             string          `json:"via"`
	// Grant asks, with an approval, to approve more than this call.
	Grant *contracts.GrantRequest `json:"grant"`
	// Passkey is the approver's assertion over the vote's statement, for a
	// request whose rule says step_up passkey.
	Passkey *contracts.PasskeyAssertion `json:"passkey"`
	// Approver is refused: identity comes from the token.
	Approver json.RawMessage `json:"approver"`
}

type answerBody struct {
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content"`
}

type inFlightAnswer struct {
	Status    string `json:"status"`
	VoteID    string `json:"vote_id,omitempty"`
	CommandID string `json:"command_id,omitempty"`
}

// validClientID reports whether id can serve as a message id: 1 to 128
// characters of A-Z, a-z, 0-9 and - _ . :
func validClientID(id string) bool { return contracts.ValidClientID(id) }

// refusal answers a refused vote or command with its reason's one HTTP
// status and message (contracts.Reason).
func refusal(reason string) *Error {
	r := contracts.Reason(reason)
	return &Error{Status: r.HTTPStatus(), Code: reason, Message: r.Message()}
}

// limits is the size budget of the server the API publishes to.
func (s *Server) limits() contracts.Limits {
	return contracts.LimitsFor(s.cfg.JS.Conn().MaxPayload())
}

// readVoteBody decodes and checks a vote's body, with the rules every
// surface shares; a body that names its approver is a forged identity
// attempt, refused and counted.
func (s *Server) readVoteBody(w http.ResponseWriter, r *http.Request, body *voteBody) *Error {
	if aerr := decodeBody(w, r, body, false); aerr != nil {
		return aerr
	}
	return s.checkVoteBody(body, "")
}

// checkVoteBody applies the rules every vote's body must meet; at names
// the body's place in a batch ("votes[3]." or "vote."), "" for a single vote.
func (s *Server) checkVoteBody(body *voteBody, at string) *Error {
	aerr := s.voteBodyProblem(body)
	if aerr != nil && aerr.Field != "" {
		aerr.Field = at + aerr.Field
	}
	return aerr
}

func (s *Server) voteBodyProblem(body *voteBody) *Error {
	if len(body.Approver) > 0 {
		s.m.votes.WithLabelValues(CodeApproverNotAllowed).Inc()
		return fieldError(http.StatusBadRequest, CodeApproverNotAllowed, "approver",
			"a vote cannot name its approver; it is cast in the name of the token's subject")
	}
	if aerr := validateVote(body); aerr != nil {
		return aerr
	}
	if aerr := checkVote(s.limits(), contracts.Vote{
		Decision: body.Decision, Comment: body.Comment, Arguments: body.Arguments,
		ArgumentsSHA256: body.ArgumentsSHA256, Answer: body.contractAnswer(),
	}); aerr != nil {
		s.m.votes.WithLabelValues(aerr.Code).Inc()
		return aerr
	}
	return nil
}

// postVote answers POST /v1/approvals/{event_id}/votes.
func (s *Server) postVote(w http.ResponseWriter, r *http.Request) {
	if !s.allow(w, s.voteRate, principalFrom(r.Context()), 1, "votes") {
		return
	}
	id, aerr := eventIDParam(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var body voteBody
	if aerr := s.readVoteBody(w, r, &body); aerr != nil {
		writeError(w, aerr)
		return
	}
	ans := s.vote(r.Context(), principalFrom(r.Context()), id, body)
	switch {
	case ans.err != nil:
		writeError(w, ans.err)
	case ans.status == http.StatusAccepted:
		writeJSON(w, http.StatusAccepted, inFlightAnswer{Status: "in_flight", VoteID: ans.voteID})
	default:
		writeJSON(w, http.StatusOK, recordAnswer{Record: ans.rec, Revision: ans.rev})
	}
}

// voteAnswer is what came of one vote over HTTP: the status a single vote
// is answered with (200 counted, 202 in flight, else err), the record when
// counted, and the vote's id.
type voteAnswer struct {
	status int
	voteID string
	rec    *contracts.Record
	rev    uint64
	err    *Error
}

func failedVote(voteID string, e *Error) voteAnswer {
	return voteAnswer{status: e.Status, voteID: voteID, err: e}
}

// vote casts body, already checked by readVoteBody's rules, on approval id
// as p, and waits for the arbiter's answer. It is the one vote path of the
// API: a single vote and each vote of a batch go through it.
func (s *Server) vote(ctx context.Context, p *Principal, id string, body voteBody) voteAnswer {
	current, _, aerr := s.readableRecordSoon(ctx, p, id, unknownEventWait)
	if aerr != nil {
		if aerr.Code == CodeUnknownEvent {
			s.m.votes.WithLabelValues(contracts.ReasonUnknownEvent).Inc()
		}
		return failedVote(body.VoteID, aerr)
	}
	if body.VoteID == "" {
		body.VoteID = uuid.Must(uuid.NewV7()).String()
	}
	if body.Via == "" {
		body.Via = contracts.ViaAPI
	}
	vote := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: body.VoteID, EventID: id, Decision: body.Decision,
		Approver: contracts.Approver{ID: p.Subject, Via: body.Via}, Comment: body.Comment,
		Arguments: body.Arguments, ArgumentsSHA256: body.ArgumentsSHA256, DecidedAt: s.cfg.Now().UTC(),
		ApproverTenants: p.Tenants, Grant: body.Grant, Passkey: body.Passkey,
	}
	vote.Answer = body.contractAnswer()
	// The arbiter decides, but an approver's edit or answer that fails the
	// request's schema is answered here at once, with the failing value's
	// pointer. Anyone else's vote goes to the arbiter, which refuses and
	// counts it as not_an_approver.
	if !current.Terminal() && approval.IsApprover(current, p.Subject) {
		if e := approval.CheckVoteContent(&current.Request, &vote); e != nil {
			s.m.votes.WithLabelValues(contracts.ReasonInvalidArguments).Inc()
			return failedVote(vote.VoteID, schemaRefusal(e.Field, e.Message))
		}
		if why := grantProblem(&current.Request, &vote); why != "" {
			s.m.votes.WithLabelValues(contracts.ReasonGrantNotAllowed).Inc()
			return failedVote(vote.VoteID, grantRefusal(why))
		}
	}
	res, err := s.castVote(ctx, vote)
	if err != nil {
		s.m.votes.WithLabelValues("error").Inc()
		return failedVote(vote.VoteID, s.backendError("publish vote", err))
	}
	rec, rev, done, reason, detail := res.rec, res.rev, res.done, res.reason, res.detail
	s.log.Info("vote", "event_id", id, "vote_id", vote.VoteID, "approver", p.Subject, "decision", vote.Decision, "token_name", p.Name)
	switch {
	case !done:
		s.m.votes.WithLabelValues("in_flight").Inc()
		return voteAnswer{status: http.StatusAccepted, voteID: vote.VoteID}
	case reason == contracts.ReasonInvalidArguments && detail != "":
		s.m.votes.WithLabelValues(reason).Inc()
		field, msg, _ := strings.Cut(detail, ": ")
		return failedVote(vote.VoteID, schemaRefusal(field, msg))
	case reason == contracts.ReasonGrantNotAllowed && detail != "":
		s.m.votes.WithLabelValues(reason).Inc()
		return failedVote(vote.VoteID, grantRefusal(detail))
	case reason != "":
		s.m.votes.WithLabelValues(reason).Inc()
		return failedVote(vote.VoteID, refusal(reason))
	default:
		s.m.votes.WithLabelValues("counted").Inc()
		return voteAnswer{status: http.StatusOK, voteID: vote.VoteID, rec: rec, rev: rev}
	}
}

// voteResult is what the arbiter made of a vote: done is false when it had
// not answered within arbiterWait; reason is its refusal, "" when counted.
type voteResult struct {
	rec            *contracts.Record
	rev            uint64
	done           bool
	reason, detail string
}

// castVote publishes vote and waits for the arbiter's answer. A vote id
// already used by someone else's vote is refused as a duplicate: the
// arbiter ignores the second vote with that id.
func (s *Server) castVote(ctx context.Context, vote contracts.Vote) (voteResult, error) {
	var reason, detail string
	match := func(rec *contracts.Record) bool {
		for _, v := range rec.Votes {
			if v.VoteID == vote.VoteID {
				if v.Approver.ID != vote.Approver.ID {
					reason = contracts.ReasonDuplicateVote
				}
				return true
			}
		}
		for _, rv := range rec.RefusedVotes {
			if rv.VoteID == vote.VoteID {
				reason, detail = rv.Reason, rv.Detail
				if rv.Approver.ID != vote.Approver.ID {
					reason = contracts.ReasonDuplicateVote
				}
				return true
			}
		}
		return false
	}
	rec, rev, done, err := s.publishAndWatch(ctx, vote.EventID, func(pctx context.Context) error {
		// By request when an arbiter answers, else stored (events.VoteSender).
		_, err := s.votes.Send(pctx, s.cfg.JS, &vote)
		return err
	}, match)
	if err != nil {
		return voteResult{}, err
	}
	return voteResult{rec: rec, rev: rev, done: done, reason: reason, detail: detail}, nil
}

// unknownEventWait is how long a vote waits for a record that does not
// exist yet before it is answered unknown_event.
const unknownEventWait = 2 * time.Second

// validateVote checks what only the HTTP API allows of a vote: its vote_id
// when the client chose one, and via. What every surface checks of a vote
// is checkVote's.
func validateVote(b *voteBody) *Error {
	bad := func(field, format string, args ...any) *Error {
		return fieldError(http.StatusBadRequest, CodeInvalidField, field, format, args...)
	}
	switch {
	case b.VoteID != "" && !validClientID(b.VoteID):
		return bad("vote_id", "vote_id must be 1 to %d characters of A-Z, a-z, 0-9 and - _ . :", maxClientID)
	case b.Via != "" && b.Via != contracts.ViaAPI && b.Via != contracts.ViaCLI:
		return bad("via", "via must be api or cli")
	}
	return nil
}

func (b *voteBody) contractAnswer() *contracts.Answer {
	if b.Answer == nil {
		return nil
	}
	return &contracts.Answer{Action: b.Answer.Action, Content: b.Answer.Content}
}

// checkVote applies the contract's rules for a vote (contracts.Limits.CheckVote),
// the same the channels' resolver and the arbiter apply: a malformed field is
// invalid_field (400), bad arguments invalid_arguments (400), and what is
// over its size limit too_large (413).
func checkVote(lim contracts.Limits, v contracts.Vote) *Error {
	e := lim.CheckVote(&v)
	if e == nil {
		return nil
	}
	return contractError(e)
}

// contractError is the answer to a broken rule of the contract.
func contractError(e *contracts.FieldError) *Error {
	switch e.Code {
	case contracts.ReasonTooLarge:
		return fieldError(http.StatusRequestEntityTooLarge, CodeTooLarge, e.Field, "%s", e.Message)
	case contracts.ReasonInvalidArguments:
		return fieldError(http.StatusBadRequest, CodeInvalidArguments, e.Field, "%s", e.Message)
	}
	return fieldError(http.StatusBadRequest, CodeInvalidField, e.Field, "%s", e.Message)
}

// schemaRefusal is the answer to an edit or answer that fails the request's
// JSON Schema: field is the JSON pointer of the failing value, such as
// arguments/amount.
func schemaRefusal(field, msg string) *Error {
	return fieldError(http.StatusBadRequest, CodeInvalidArguments, field, "%s: %s", field, msg)
}

// publishAndWatch registers a watch on the record, publishes, and waits up
// to arbiterWait until match sees the arbiter's answer in the record. The
// publish is completed even if the client goes away.
func (s *Server) publishAndWatch(ctx context.Context, id string, publish func(context.Context) error, match func(*contracts.Record) bool) (*contracts.Record, uint64, bool, error) {
	wake := make(chan struct{}, 1)
	w, stop, err := s.index.watch(ctx, id, wake)
	if err != nil {
		return nil, 0, false, err
	}
	defer stop()
	if st, ok := w.state(); ok && match(st.rec) {
		// Already answered: an idempotent retry of a vote or command.
		return st.rec, st.rev, true, nil
	}
	pctx, cancelPub := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = publish(pctx)
	cancelPub()
	if err != nil {
		return nil, 0, false, err
	}
	timer := time.NewTimer(arbiterWait)
	defer timer.Stop()
	for {
		select {
		case <-wake:
			if st, ok := w.state(); ok && match(st.rec) {
				return st.rec, st.rev, true, nil
			}
		case <-timer.C:
			return nil, 0, false, nil
		case <-ctx.Done():
			return nil, 0, false, nil
		case <-s.done:
			return nil, 0, false, nil
		}
	}
}
