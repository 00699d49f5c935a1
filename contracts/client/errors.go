package client

import (
	"errors"
	"fmt"

	"github.com/countersign/countersign/contracts"
)

// Error is an answer of the API other than 2xx: its HTTP status and the
// stable code, message and field of the API's error body.
type Error struct {
	Status  int
	Code    string
	Message string
	// Field names the request field at fault, when there is one.
	Field string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("countersign: %s (%d)", e.Code, e.Status)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Field != "" {
		s += " [field " + e.Field + "]"
	}
	return s
}

// Is matches another *Error by code, so errors.Is(err, ErrAlreadyClaimed)
// holds for any answer with that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code != "" && t.Code == e.Code
}

// Sentinels to match with errors.Is. Each carries only a code.
var (
	ErrAlreadyClaimed      = &Error{Code: contracts.ReasonAlreadyClaimed}
	ErrNotApproved         = &Error{Code: contracts.ReasonNotApproved}
	ErrNotAnApprover       = &Error{Code: contracts.ReasonNotAnApprover}
	ErrSelfApproval        = &Error{Code: contracts.ReasonSelfApproval}
	ErrDuplicateVote       = &Error{Code: contracts.ReasonDuplicateVote}
	ErrClosed              = &Error{Code: contracts.ReasonClosed}
	ErrStaleArguments      = &Error{Code: contracts.ReasonStaleArguments}
	ErrDecisionNotAllowed  = &Error{Code: contracts.ReasonDecisionNotAllowed}
	ErrUnknownEvent        = &Error{Code: contracts.ReasonUnknownEvent}
	ErrArgumentsChanged    = &Error{Code: "arguments_changed"}
	ErrUnauthenticated     = &Error{Code: "unauthenticated"}
	ErrForbidden           = &Error{Code: "forbidden"}
	ErrNotFound            = &Error{Code: "not_found"}
	ErrUnavailable         = &Error{Code: "unavailable"}
	ErrInvalidArguments    = &Error{Code: contracts.ReasonInvalidArguments}
	ErrApproverNotAllowed  = &Error{Code: "approver_not_allowed"}
	ErrInvalidField        = &Error{Code: "invalid_field"}
	ErrDecisionOutOfOrder  = &Error{Code: contracts.ReasonOutOfOrder}
	ErrInvalidJSON         = &Error{Code: "invalid_json"}
	ErrRequestBodyTooLarge = &Error{Code: "body_too_large"}
)

// ErrInFlight means the arbiter had not applied a vote or claim within the
// API's wait. The message is durable: read the approval to see its effect.
var ErrInFlight = errors.New("client: still in flight: the arbiter has not applied it yet")
