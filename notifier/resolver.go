package notifier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
)

// ErrUnknownEvent is returned by a Resolver for an approval it does not know.
var ErrUnknownEvent = errors.New("notifier: unknown approval")

// Resolver is what the interactive channels (Slack buttons and modals, email
// confirmation pages) use to read an approval and cast a vote. The HTTP API
// implements it over the bus; channels never publish votes themselves.
type Resolver interface {
	// Record returns the current record of an approval, or ErrUnknownEvent.
	Record(ctx context.Context, eventID string) (*contracts.Record, error)
	// Vote publishes v (its Approver set from a verified identity: a Slack
	// signature and the directory, or a signed email link) and waits a few
	// seconds for the arbiter's answer. A vote with a VoteID that was
	// already counted or refused returns that earlier answer.
	Vote(ctx context.Context, v contracts.Vote) (VoteResult, error)
	// DecideRun casts v (Approver from a verified identity, VoteID the
	// batch's id, Decision and Comment) on every pending approval of run
	// runID, of agent when not empty, that v's approver may read and is
	// named among its approvers (or that names none): the rules of
	// POST /v1/votes with run_id. Each approval's vote id is derived from
	// v.VoteID and the approval, so calling again with the same VoteID
	// casts nothing twice and reports again what the first call decided.
	// v.EventID is ignored. Each vote is applied by the arbiter on its own
	// approval with all its rules; one refusal does not stop the others.
	DecideRun(ctx context.Context, runID, agent string, v contracts.Vote) (RunDecision, error)
}

// RunDecision is what came of DecideRun: one RunVote per approval voted on,
// oldest first.
type RunDecision struct {
	Votes []RunVote
	// Truncated: the run had more pending approvals than one batch casts
	// (100); deciding again casts the rest.
	Truncated bool
}

// Counts are how many of d's votes counted, were refused, and are in flight.
func (d RunDecision) Counts() (counted, refused, inFlight int) {
	for _, v := range d.Votes {
		switch {
		case v.Counted:
			counted++
		case v.InFlight:
			inFlight++
		default:
			refused++
		}
	}
	return counted, refused, inFlight
}

// RunVote is one vote of a RunDecision: the approval's request (as it was
// listed, for saying which call the result is about) and the vote's result.
// A refusal's Detail is the message a person reads.
type RunVote struct {
	Request *contracts.ApprovalRequested
	VoteResult
}

// VoteResult is what the arbiter made of a vote.
type VoteResult struct {
	// Counted is true when the vote counted (the record may now be terminal).
	Counted bool
	// Refused is the refusal reason code (contracts.Reason*) when it did not.
	Refused string
	// Detail says more about a refusal, e.g. the schema error of an edit:
	// "arguments/amount: maximum: got 5000, want 1000".
	Detail string
	// InFlight is true when the arbiter had not answered within the wait;
	// the vote is stored and will be applied.
	InFlight bool
	// Record is the record after the vote, when answered.
	Record *contracts.Record
}

// retryAfterError asks for the next attempt no sooner than After.
type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.err, e.after)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as transient and asks the notifier to wait at least d
// before the next attempt (a 429 or 503 with Retry-After).
func RetryAfter(d time.Duration, err error) error {
	if d < 0 {
		d = 0
	}
	return &retryAfterError{after: d, err: err}
}

// RetryAfterOf returns the delay asked for by RetryAfter anywhere in err's chain.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// heldUntilError says a notification may not be sent before until (its
// person's quiet hours): not a failure, a later time.
type heldUntilError struct {
	until time.Time
	err   error
}

func (e *heldUntilError) Error() string {
	return fmt.Sprintf("%v (held until %s)", e.err, e.until.UTC().Format(time.RFC3339))
}
func (e *heldUntilError) Unwrap() error { return e.err }

// HeldUntil marks err as a hold: the notification is sent at until, if
// its request still waits then, and no receipt is published meanwhile.
func HeldUntil(until time.Time, err error) error { return &heldUntilError{until: until, err: err} }

// HeldUntilOf returns the time HeldUntil asked for anywhere in err's chain.
func HeldUntilOf(err error) (time.Time, bool) {
	var h *heldUntilError
	if errors.As(err, &h) {
		return h.until, true
	}
	return time.Time{}, false
}
