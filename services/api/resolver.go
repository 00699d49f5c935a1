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
