package orchestrator

import (
	"errors"
	"fmt"
)

// Error is an error of the agent library with a stable code. Match it with
// errors.Is against the sentinels below (by code, whatever its field and
// message); read Field and Message for the specifics, never the text of
// Error().
type Error struct {
	// Code is stable: arguments_changed, invalid_arguments, invalid_field,
	// invalid_schema, already_executed, not_approved.
	Code string
	// Field names what is at fault in the review, e.g.
	// tool_calls[0].arguments ("" for the whole call).
	Field string
	// Message says what is wrong, for a person.
	Message string
	// Err is the cause, if any.
	Err error
}

func (e *Error) Error() string {
	s := "orchestrator: "
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Code + ": " + e.Message
}

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

func (e *Error) Unwrap() error { return e.Err }

// Errors a caller can branch on (with errors.Is).
var (
	// ErrArgumentsChanged: a review re-used run and tool call ids with other arguments.
	ErrArgumentsChanged = &Error{Code: "arguments_changed", Message: "the run and tool call ids were already reviewed with other arguments"}
	// ErrInvalidArguments: tool call arguments are not a JSON object.
	ErrInvalidArguments = &Error{Code: "invalid_arguments", Message: "tool call arguments must be a JSON object"}
	// ErrInvalidField: a field of a review or question is missing or wrong.
	ErrInvalidField = &Error{Code: "invalid_field", Message: "a field is missing or not valid"}
	// ErrAlreadyExecuted: the approval was already claimed by another execution.
	ErrAlreadyExecuted = &Error{Code: "already_executed", Message: "this approval was already claimed"}
	// ErrNotApproved: a permit was claimed for a record that is not approved for these arguments.
	ErrNotApproved = &Error{Code: "not_approved", Message: "no approval for these arguments"}
	// ErrApprovalLapsed: the approval was not claimed within its rule's
	// claim_within of the decision; the call needs a new decision.
	ErrApprovalLapsed = &Error{Code: "approval_lapsed", Message: "this approval was not claimed in time and has lapsed"}
	// ErrNotPermitted: the permit's agent may not claim this approval.
	ErrNotPermitted = &Error{Code: "not_permitted", Message: "only the agent that submitted the request (or an admin) may claim it"}
	// ErrInvalidSchema: a tool's or a question's JSON Schema is not a usable
	// schema (not an object, does not compile, or refers to other documents).
	ErrInvalidSchema = &Error{Code: "invalid_schema", Message: "not a usable JSON Schema"}
)

// fieldErr is err (a sentinel) at field, with a message of its own when
// format is not empty, wrapping cause.
func fieldErr(sentinel *Error, field string, cause error, format string, args ...any) *Error {
	e := &Error{Code: sentinel.Code, Field: field, Message: sentinel.Message, Err: cause}
	if format != "" {
		e.Message = fmt.Sprintf(format, args...)
	}
	return e
}
