package arbiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/orchestrator/reviewer"
)

// This file is the automated first reviewer's stage. When the arbiter
// creates a record whose rule names a reviewer, it freezes the reviewer's
// settings in the record (Record.Review) from the policy it checked the
// request against — the named version and, when another is live, the
// stricter of the two — never from the request. A bounded pool of workers
// then asks the reviewer, apart from the consume loop, and publishes the
// opinion on hitl.approval.opinion.<event_id>, a subject only the
// arbiter's own NATS user may publish on. The arbiter records the opinion
// like a vote (approval.ApplyOpinion): a decision only where the rule
// lets the reviewer decide, advice everywhere else. Every failure — an
// unknown reviewer, a full queue, a timeout, an error, an answer that
// cannot be read — is recorded as an opinion with an error, and the
// request waits for people. A review lost with an arbiter that stops is
// asked again when its request is redelivered; otherwise people decide.

// Defaults of the review stage.
const (
	defaultReviewWorkers = 4
	reviewQueueSize      = 256
)

// reviews is the queue of records whose reviewer is to be asked.
type reviews struct {
	jobs chan contracts.Record
	wg   sync.WaitGroup
	// asked counts opinions by reviewer and result (score, or the
	// error's reason).
	asked *prometheus.CounterVec
}

func newReviews(reg prometheus.Registerer) *reviews {
	r := &reviews{
		jobs: make(chan contracts.Record, reviewQueueSize),
		asked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_arbiter_reviews_total",
			Help: "Opinions of automated reviewers recorded, by reviewer and result (score, or why there is none).",
		}, []string{"reviewer", "result"}),
	}
	if reg != nil {
		_ = reg.Register(r.asked)
	}
	return r
}

// runReviews asks reviewers with Config.ReviewWorkers workers until ctx
// ends, and returns once they have.
func (a *Arbiter) runReviews(ctx context.Context) {
	for range a.cfg.ReviewWorkers {
		a.reviews.wg.Add(1)
		go func() {
			defer a.reviews.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case rec := <-a.reviews.jobs:
					a.review(ctx, rec)
				}
			}
		}()
	}
	a.reviews.wg.Wait()
}

// reviewOf is the reviewer a request's record freezes: the named policy
// version's for the call (Decision.ReviewerFor: judged by the risk the
// policy gives the call, not the one the request states), held, when
// another version is live, to what the live one lets it decide too
// (policy.StricterReviewer). nil when none.
func (a *Arbiter) reviewOf(ctx context.Context, req *contracts.ApprovalRequested) (*contracts.Review, error) {
	if req.Kind != contracts.KindToolApproval || req.ToolCall == nil {
		return nil, nil
	}
	p, ref, err := a.policies.find(ctx, req.Policy.Version)
	if err != nil || ref != nil {
		return nil, err
	}
	if !p.HasReviewers() {
		return nil, nil // people alone decide under the named version
	}
	in := policy.RequestInput(req)
	r := p.EvaluateContext(ctx, in).ReviewerFor()
	if r == nil {
		return nil, nil
	}
	if v, ok := a.policies.keys.liveVersion(); ok && v == req.Policy.Version {
		return r.Review(), nil
	}
	liveVersion, err := a.policies.live(ctx)
	if err != nil || liveVersion == "" || liveVersion == req.Policy.Version {
		return r.Review(), err
	}
	live, ref, err := a.policies.find(ctx, liveVersion)
	if err != nil || ref != nil {
		return nil, err
	}
	if !live.HasReviewers() {
		return policy.StricterReviewer(r, nil).Review(), nil
	}
	return policy.StricterReviewer(r, live.EvaluateContext(ctx, in).ReviewerFor()).Review(), nil
}

// startReview queues rec's review when its reviewer has not given its
// opinion; with the queue full, the opinion is that the reviewers are busy.
func (a *Arbiter) startReview(ctx context.Context, rec contracts.Record) error {
	if rec.Review == nil || rec.Review.Opinion != nil || rec.Status != contracts.StatusPending {
		return nil
	}
	select {
	case a.reviews.jobs <- rec:
		return nil
	default:
	}
	o := a.opinion(rec)
	o.Error = (&reviewer.Error{Reason: reviewer.ReasonBusy, Msg: "every reviewer worker is busy; the request is left to people"}).Error()
	return a.publishOpinion(ctx, rec, o)
}

// opinion is an opinion of rec's reviewer with nothing said yet.
func (a *Arbiter) opinion(rec contracts.Record) contracts.Opinion {
	return contracts.Opinion{
		Spec: contracts.SpecOpinion, EventID: rec.Request.EventID, Reviewer: rec.Review.Reviewer,
		ArgumentsSHA256: rec.Request.ToolCall.ArgumentsSHA256, At: a.cfg.Now().UTC(),
	}
}

// review asks rec's reviewer and publishes its opinion. A review cut off
// by the arbiter stopping publishes nothing.
func (a *Arbiter) review(ctx context.Context, rec contracts.Record) {
	timeout, err := time.ParseDuration(rec.Review.Timeout)
	if err != nil || timeout <= 0 || timeout > policy.MaxReviewerTimeout {
		timeout = policy.DefaultReviewerTimeout
	}
	var ans reviewer.Answer
	ep := a.cfg.Reviewers[rec.Review.Reviewer]
	if ep == nil {
		err = &reviewer.Error{Reason: reviewer.ReasonUnknown, Msg: fmt.Sprintf("no reviewer named %q is configured", rec.Review.Reviewer)}
	} else {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		ans, err = ep.Review(rctx, reviewer.InputFor(&rec), timeout)
		cancel()
	}
	if ctx.Err() != nil {
		return
	}
	o := a.opinion(rec)
	if err != nil {
		o.Error = contracts.TruncateText(err.Error(), contracts.MaxOpinionErrorBytes)
	} else {
		o.Score, o.Explanation = &ans.Score, ans.Explanation
	}
	if err := a.publishOpinion(ctx, rec, o); err != nil && ctx.Err() == nil {
		a.cfg.Logger.Warn("the reviewer's opinion could not be published; the request is left to people",
			"event_id", rec.Request.EventID, "reviewer", rec.Review.Reviewer, "err", err)
	}
}

// publishOpinion publishes o, once per approval (its message id).
func (a *Arbiter) publishOpinion(ctx context.Context, rec contracts.Record, o contracts.Opinion) error {
	result := "score"
	if o.Error != "" {
		result, _, _ = strings.Cut(o.Error, ":")
	}
	a.reviews.asked.WithLabelValues(o.Reviewer, result).Inc()
	_, err := events.Publish(ctx, a.cfg.JS, contracts.OpinionSubject(o.EventID), o, contracts.OpinionMsgID(o.EventID), traceHeader(rec))
	return err
}

// handleOpinion records a reviewer's opinion (approval.ApplyOpinion).
func (a *Arbiter) handleOpinion(ctx context.Context, msg jetstream.Msg) error {
	var o contracts.Opinion
	if err := contracts.Decode(msg.Data(), &o); err != nil {
		return events.Poison(fmt.Errorf("decode opinion: %w", err))
	}
	if err := approval.CheckOpinion(&o); err != nil {
		return events.Poison(fmt.Errorf("invalid opinion: %w", err))
	}
	if o.EventID != strings.TrimPrefix(msg.Subject(), contracts.SubjectOpinionPrefix) {
		return events.Poison(errors.New("opinion: event_id does not match the subject"))
	}
	by := contracts.ReviewerID(o.Reviewer)
	return a.apply(ctx, msg, op{
		eventID: o.EventID,
		apply:   func(rec contracts.Record) approval.Result { return approval.ApplyOpinion(rec, o, a.cfg.Now()) },
		tooLarge: func(rec contracts.Record) approval.Result {
			// No room for what it said: kept as an error, as advice.
			short := o
			short.Score, short.Explanation = nil, ""
			short.Error = contracts.ReasonTooLarge + ": the approval record has no room for the reviewer's opinion"
			return approval.ApplyOpinion(rec, short, a.cfg.Now())
		},
		counted: func() *contracts.Changed {
			return &contracts.Changed{Change: contracts.ChangeOpinion, By: by, Reason: o.Error}
		},
		refused: func(reason string) *contracts.Changed {
			return &contracts.Changed{Change: contracts.ChangeOpinion, By: by, Reason: reason}
		},
		changedID: "opinion",
	})
}

// isReviewerVote reports whether a vote on the bus claims a reviewer's
// identity, which only the arbiter gives (from an opinion).
func isReviewerVote(v *contracts.Vote) bool {
	return v.Approver.Via == contracts.ViaReviewer || contracts.IsReviewerID(v.Approver.ID)
}
