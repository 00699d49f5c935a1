package contracts

import "net/http"

// The contract's vocabularies as types, each with its full list and
// Valid. The constants (StatusPending, DecisionApprove, ReasonClosed, ...)
// stay untyped strings so that the wire types' string fields take them
// as they are; convert a field to its type to ask about it:
// Status(rec.Status).Terminal(), Reason(code).Message().

// Status is a record's status.
type Status string

// Statuses lists every status; all but pending are terminal.
func Statuses() []Status {
	return []Status{StatusPending, StatusApproved, StatusRejected, StatusResponded, StatusAnswered, StatusExpired, StatusCancelled}
}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool { return member(s, Statuses()) }

// Terminal reports whether s is a valid status other than pending.
func (s Status) Terminal() bool { return s != StatusPending && s.Valid() }

// Decision is what a vote decides.
type Decision string

// Decisions lists every decision a vote can carry.
func Decisions() []Decision {
	return []Decision{DecisionApprove, DecisionReject, DecisionEdit, DecisionRespond, DecisionAnswer}
}

// Valid reports whether d is one of Decisions.
func (d Decision) Valid() bool { return member(d, Decisions()) }

// Reason is the code of a refused vote or command: recorded on the record,
// announced on hitl.approval.changed, and returned by every surface. Each
// reason has one HTTP status and one message, defined here and nowhere else.
type Reason string

// reasonInfo is what a reason means to HTTP and to a person.
type reasonInfo struct {
	status  int
	message string
}

var reasons = map[Reason]reasonInfo{
	ReasonNotAnApprover:      {http.StatusForbidden, "you are not one of the approvers of this request"},
	ReasonWrongTenant:        {http.StatusForbidden, "you may decide only requests of your own tenants, and this request belongs to another"},
	ReasonSelfApproval:       {http.StatusForbidden, "you requested this call (or own the run), and this rule does not allow approving your own request"},
	ReasonDecisionNotAllowed: {http.StatusForbidden, "this decision is not allowed for this request"},
	ReasonDuplicateVote:      {http.StatusConflict, "you have already voted on this request"},
	ReasonClosed:             {http.StatusConflict, "the request was already decided"},
	ReasonStaleArguments:     {http.StatusConflict, "the arguments changed since you saw them; look at the request again"},
	ReasonOutOfOrder:         {http.StatusConflict, "the approvers of this request vote in order, and it is not your turn yet"},
	ReasonAlreadyClaimed:     {http.StatusConflict, "this approval was already claimed; the call must not run again"},
	ReasonNotApproved:        {http.StatusConflict, "this approval is not approved"},
	ReasonInvalidArguments:   {http.StatusBadRequest, "the arguments do not match the tool's schema"},
	ReasonMalformed:          {http.StatusUnprocessableEntity, "the vote is malformed"},
	ReasonTooLarge:           {http.StatusRequestEntityTooLarge, "what you sent is too large"},
	ReasonUnknownEvent:       {http.StatusNotFound, "the request does not exist (or has been removed)"},
	ReasonGrantNotAllowed:    {http.StatusForbidden, "this rule does not permit the grant you asked for"},
	ReasonUnknownGrant:       {http.StatusNotFound, "the grant does not exist (or has been removed)"},
	ReasonUnknownApprover:    {http.StatusForbidden, "the directory does not list you (or you were removed from it), so you may not decide or manage requests"},
	ReasonNotPermitted:       {http.StatusForbidden, "you may not do this to this request"},
	ReasonDeadlineNotLater:   {http.StatusUnprocessableEntity, "an extension must move the deadline later than it is"},
	ReasonApprovalLapsed:     {http.StatusConflict, "this approval was not claimed in time and has lapsed; the call needs a new decision"},
	ReasonStepUpRequired:     {http.StatusForbidden, "this rule counts an approval only when you sign it with one of your passkeys"},
	ReasonPasskeyUnknown:     {http.StatusForbidden, "the passkey is not one you have enrolled, or it was revoked"},
	ReasonPasskeyMismatch:    {http.StatusForbidden, "the passkey signed a different statement than this vote (another request, tool, arguments or decision)"},
	ReasonPasskeyStale:       {http.StatusForbidden, "the passkey signature is too old (or dated in the future); sign again"},
	ReasonPasskeyInvalid:     {http.StatusForbidden, "the passkey signature does not verify"},
	ReasonNotClaimed:         {http.StatusConflict, "nobody claimed this approval, so there is no outcome to report"},
	ReasonOutcomeReported:    {http.StatusConflict, "the outcome of this call was reported already"},
}

// Reasons lists every refusal reason.
func Reasons() []Reason {
	return []Reason{
		ReasonNotAnApprover, ReasonSelfApproval, ReasonDecisionNotAllowed, ReasonDuplicateVote, ReasonClosed,
		ReasonStaleArguments, ReasonOutOfOrder, ReasonAlreadyClaimed, ReasonNotApproved, ReasonInvalidArguments,
		ReasonMalformed, ReasonTooLarge, ReasonUnknownEvent, ReasonWrongTenant, ReasonGrantNotAllowed, ReasonUnknownGrant,
		ReasonUnknownApprover, ReasonNotPermitted, ReasonDeadlineNotLater, ReasonApprovalLapsed,
		ReasonStepUpRequired, ReasonPasskeyUnknown, ReasonPasskeyMismatch, ReasonPasskeyStale, ReasonPasskeyInvalid,
		ReasonNotClaimed, ReasonOutcomeReported,
	}
}

// Valid reports whether r is one of Reasons.
func (r Reason) Valid() bool { _, ok := reasons[r]; return ok }

// HTTPStatus is the status an HTTP surface answers a refusal with: 403 for
// who may not, 409 for what conflicts with the record's state, 400 for bad
// content, 413 for what is too large, 404 for an unknown approval; 422 for
// a code this release does not know.
func (r Reason) HTTPStatus() int {
	if info, ok := reasons[r]; ok {
		return info.status
	}
	return http.StatusUnprocessableEntity
}

// Message explains the refusal to the person whose vote or command it was
// ("" for no reason).
func (r Reason) Message() string {
	if r == "" {
		return ""
	}
	if info, ok := reasons[r]; ok {
		return info.message
	}
	return "refused (" + string(r) + ")"
}

func member[T comparable](v T, list []T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
