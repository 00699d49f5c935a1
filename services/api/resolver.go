package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/notifier"
)

// Resolver returns the notifier.Resolver through which the interactive
// channels (Slack interactions, email confirmation pages) read approvals and
// vote. Their votes go through the same path as the API's: published on the
// bus, decided by the arbiter, counted in the API's vote metrics by result.
func (s *Server) Resolver() notifier.Resolver { return resolver{s} }

type resolver struct{ s *Server }

func (r resolver) Record(ctx context.Context, id string) (*contracts.Record, error) {
	if !contracts.ValidEventID(id) {
		return nil, notifier.ErrUnknownEvent
	}
	rec, _, aerr := r.s.getRecordSoon(ctx, id, unknownEventWait)
	if aerr != nil {
		if aerr.Code == CodeUnknownEvent {
			return nil, notifier.ErrUnknownEvent
		}
		return nil, errors.New(aerr.Message)
	}
	return rec, nil
}

func (r resolver) Vote(ctx context.Context, v contracts.Vote) (notifier.VoteResult, error) {
	s := r.s
	if v.Approver.ID == "" || v.Approver.Via == "" || v.VoteID == "" {
		return notifier.VoteResult{}, fmt.Errorf("api: a channel's vote needs a vote id, an approver and a channel")
	}
	current, err := r.Record(ctx, v.EventID)
	if errors.Is(err, notifier.ErrUnknownEvent) {
		s.m.votes.WithLabelValues(contracts.ReasonUnknownEvent).Inc()
		return notifier.VoteResult{Refused: contracts.ReasonUnknownEvent}, nil
	}
	if err != nil {
		return notifier.VoteResult{}, err
	}
	v.Spec = contracts.SpecVote
	if len(v.ApproverTenants) == 0 && s.cfg.Directory != nil {
		// A channel knows the person, the directory their tenants.
		if u, ok := s.cfg.Directory.Current().User(v.Approver.ID); ok {
			v.ApproverTenants = u.Tenants
		}
	}
	if v.DecidedAt.IsZero() {
		v.DecidedAt = s.cfg.Now().UTC()
	}
	// The channels' votes follow the rules every surface shares; the
	// arbiter would refuse the same, after a round trip.
	if e := contracts.CheckVoteIdentity(&v); e != nil {
		s.m.votes.WithLabelValues(contracts.ReasonMalformed).Inc()
		return notifier.VoteResult{Refused: contracts.ReasonMalformed, Detail: e.Field + ": " + e.Message, Record: current}, nil
	}
	if e := s.limits().CheckVote(&v); e != nil {
		s.m.votes.WithLabelValues(e.Code).Inc()
		return notifier.VoteResult{Refused: e.Code, Detail: e.Field + ": " + e.Message, Record: current}, nil
	}
	// An approver's edit or answer that fails the request's schema is
	// answered at once with the failing value's path, as over HTTP.
	if !current.Terminal() && approval.IsApprover(current, v.Approver.ID) {
		if e := approval.CheckVoteContent(&current.Request, &v); e != nil {
			s.m.votes.WithLabelValues(contracts.ReasonInvalidArguments).Inc()
			return notifier.VoteResult{Refused: contracts.ReasonInvalidArguments, Detail: e.Field + ": " + e.Message, Record: current}, nil
		}
	}
	res, err := s.castVote(ctx, v)
	if err != nil {
		s.m.votes.WithLabelValues("error").Inc()
		return notifier.VoteResult{}, err
	}
	s.log.Info("vote", "event_id", v.EventID, "vote_id", v.VoteID, "approver", v.Approver.ID, "via", v.Approver.Via, "decision", v.Decision)
	switch {
	case !res.done:
		s.m.votes.WithLabelValues("in_flight").Inc()
		return notifier.VoteResult{InFlight: true}, nil
	case res.reason != "":
		s.m.votes.WithLabelValues(res.reason).Inc()
		return notifier.VoteResult{Refused: res.reason, Detail: res.detail, Record: res.rec}, nil
	default:
		s.m.votes.WithLabelValues("counted").Inc()
		return notifier.VoteResult{Counted: true, Record: res.rec}, nil
	}
}

// DecideRun casts v on the pending approvals of a run that v's approver may
// decide, through the API's run batch (the code of POST /v1/votes with
// run_id): the same listing, vote ids, single-vote path and results. The
// approver acts as an approver of the directory, within the directory's
// tenants of that person.
func (r resolver) DecideRun(ctx context.Context, runID, agent string, v contracts.Vote) (notifier.RunDecision, error) {
	s := r.s
	if v.Approver.ID == "" || v.Approver.Via == "" || v.VoteID == "" {
		return notifier.RunDecision{}, fmt.Errorf("api: a channel's run decision needs a vote id, an approver and a channel")
	}
	if runID == "" {
		return notifier.RunDecision{}, fmt.Errorf("api: a run decision needs a run id")
	}
	v.Spec = contracts.SpecVote
	if len(v.ApproverTenants) == 0 && s.cfg.Directory != nil {
		if u, ok := s.cfg.Directory.Current().User(v.Approver.ID); ok {
			v.ApproverTenants = u.Tenants
		}
	}
	// The vote's identity (vote id, approver, via) is checked as a single
	// vote's is; it names no approval yet, hence the placeholder.
	probe := v
	probe.EventID = "run"
	if e := contracts.CheckVoteIdentity(&probe); e != nil {
		return notifier.RunDecision{}, fmt.Errorf("api: a channel's run decision: %s: %s", e.Field, e.Message)
	}
	body := voteBody{VoteID: v.VoteID, Decision: v.Decision, Comment: v.Comment, Arguments: v.Arguments,
		ArgumentsSHA256: v.ArgumentsSHA256, Grant: v.Grant}
	if v.Answer != nil {
		body.Answer = &answerBody{Action: v.Answer.Action, Content: v.Answer.Content}
	}
	// The rules of a batch's vote body; via is the channel's, which only
	// a channel may give.
	if aerr := s.voteBodyProblem(&body); aerr != nil {
		return notifier.RunDecision{}, fmt.Errorf("api: a channel's run decision: %s", aerr.Message)
	}
	body.Via = v.Approver.Via
	p := &Principal{Name: v.Approver.Via, Subject: v.Approver.ID, Roles: []string{RoleApprover}, Tenants: v.ApproverTenants}
	items, truncated, aerr := s.runBatch(ctx, p, runID, agent, body)
	if aerr != nil {
		return notifier.RunDecision{}, errors.New(aerr.Message)
	}
	ans := s.castBatch(ctx, p, items)
	out := notifier.RunDecision{Votes: make([]notifier.RunVote, len(ans.Results)), Truncated: truncated}
	for i, res := range ans.Results {
		rv := notifier.RunVote{Request: items[i].req}
		switch res.Result {
		case BatchCounted:
			rv.Counted, rv.Record = true, res.rec
		case BatchInFlight:
			rv.InFlight = true
		default:
			rv.Refused = contracts.ReasonMalformed
			if res.Error != nil {
				rv.Refused, rv.Detail = res.Error.Code, res.Error.Message
			}
		}
		out.Votes[i] = rv
	}
	return out, nil
}
