package approval

import (
	"fmt"
	"slices"
	"time"

	"github.com/countersign/countersign/contracts"
)

// ReviewerMayApprove reports whether rec's reviewer may approve its
// request with a low score: the rule sets approve_below, the request is a
// tool call whose risk is at most the rule's up_to_risk, no step-up guards
// it (a reviewer holds no passkey), its approvers are not taken in order,
// and approve is one of its decisions. Anywhere else its opinion is advice.
func ReviewerMayApprove(rec *contracts.Record) bool {
	rv, req := rec.Review, &rec.Request
	switch {
	case rv == nil || rv.ApproveBelow <= 0 || req.Kind != contracts.KindToolApproval || req.ToolCall == nil:
		return false
	case contracts.RiskRank(req.Risk) == 0 || contracts.RiskRank(req.Risk) > contracts.RiskRank(rv.UpToRisk):
		return false
	case req.StepUp != "" || req.Quorum.Order == contracts.OrderSequence:
		return false
	}
	return len(req.AllowedDecisions) == 0 || slices.Contains(req.AllowedDecisions, contracts.DecisionApprove)
}

// ReviewerMayReject reports whether rec's reviewer may reject its request
// with a high score: the rule sets reject_above.
func ReviewerMayReject(rec *contracts.Record) bool {
	rv := rec.Review
	return rv != nil && rv.RejectAbove != nil && rec.Request.Kind == contracts.KindToolApproval
}

// CheckOpinion checks an opinion's fields: a score from 0 to 100 or an
// error, not both, and bounded texts.
func CheckOpinion(o *contracts.Opinion) error {
	switch {
	case o.Spec != contracts.SpecOpinion:
		return fmt.Errorf("unknown spec %q", contracts.TruncateText(o.Spec, 64))
	case !contracts.ValidEventID(o.EventID):
		return fmt.Errorf("event_id is not a valid approval id")
	case o.Reviewer == "" || len(o.Reviewer) > contracts.MaxApproverIDBytes || !contracts.ValidText(o.Reviewer):
		return fmt.Errorf("reviewer is required: at most %d bytes of text", contracts.MaxApproverIDBytes)
	case (o.Score == nil) == (o.Error == ""):
		return fmt.Errorf("an opinion has a score or an error, not both")
	case o.Score != nil && (*o.Score < 0 || *o.Score > contracts.MaxReviewScore):
		return fmt.Errorf("score %d is not between 0 and %d", *o.Score, contracts.MaxReviewScore)
	case len(o.Explanation) > contracts.MaxExplanationBytes || !contracts.ValidText(o.Explanation):
		return fmt.Errorf("explanation: at most %d bytes of text", contracts.MaxExplanationBytes)
	case len(o.Error) > contracts.MaxOpinionErrorBytes || !contracts.ValidText(o.Error):
		return fmt.Errorf("error: at most %d bytes of text", contracts.MaxOpinionErrorBytes)
	}
	return nil
}

// ApplyOpinion records the reviewer's opinion o on rec at now. The first
// opinion stands; another is a duplicate. On a pending record, an opinion
// for the arguments under review counts as the reviewer's vote where the
// rule lets it (ReviewerMayApprove with a score below approve_below,
// ReviewerMayReject with a score above reject_above): a vote by
// contracts.ReviewerID(name), counted toward the quorum and the veto like
// a person's. Anything else, an error above all, is advice: the record
// stays pending for people. An opinion on a decided record is kept for the
// oversight report and changes nothing else. Refusal is set, with no
// change, for an opinion the record has no reviewer for.
func ApplyOpinion(rec contracts.Record, o contracts.Opinion, now time.Time) Result {
	if rec.Review == nil || rec.Review.Reviewer != o.Reviewer {
		return Result{Refusal: contracts.ReasonNotAnApprover}
	}
	if rec.Review.Opinion != nil {
		return Result{Duplicate: true}
	}
	next := clone(rec)
	next.UpdatedAt = now
	rv := *rec.Review
	rv.Opinion, rv.Effect = &o, contracts.EffectAdvice
	next.Review = &rv
	if rec.Status != contracts.StatusPending || o.Score == nil || o.ArgumentsSHA256 != currentArgsSHA(rec) {
		return Result{Record: next, Changed: true}
	}
	score := *o.Score
	v := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: contracts.OpinionMsgID(rec.Request.EventID), EventID: rec.Request.EventID,
		Approver:        contracts.Approver{ID: contracts.ReviewerID(o.Reviewer), Via: contracts.ViaReviewer},
		ArgumentsSHA256: o.ArgumentsSHA256, DecidedAt: now,
		Comment: contracts.TruncateText(fmt.Sprintf("Automated review: score %d/100. %s", score, o.Explanation), contracts.MaxCommentBytes),
	}
	switch {
	case ReviewerMayApprove(&rec) && score < rv.ApproveBelow:
		v.Decision, rv.Effect = contracts.DecisionApprove, contracts.EffectApproved
		next.Votes = append(next.Votes, v)
		if approvers := approvalsFor(next, currentArgsSHA(next)); len(approvers) >= max(1, rec.Request.Quorum.Required) {
			decide(&next, contracts.StatusApproved, v, now, approvers)
		}
	case ReviewerMayReject(&rec) && score > *rv.RejectAbove:
		v.Decision, rv.Effect = contracts.DecisionReject, contracts.EffectRejected
		next.Votes = append(next.Votes, v)
		if rec.Request.Quorum.Veto || !approvalStillPossible(next) {
			decide(&next, contracts.StatusRejected, v, now, nil)
			next.Outcome.Reason = v.Comment
		}
	}
	return Result{Record: next, Changed: true, Decided: next.Status != contracts.StatusPending}
}
