package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/countersign/countersign/contracts"
)

// Error codes of the API besides the arbiter's refusal reasons
// (contracts.Reason*), which are returned as they are.
const (
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInvalidJSON      = "invalid_json"
	CodeUnknownField     = "unknown_field"
	CodeBodyTooLarge     = "body_too_large"
	// CodeTooLarge: a field (arguments, a schema, a comment...) does not
	// fit the size budget (contracts.Limits); the HTTP status is 413.
	CodeTooLarge           = contracts.ReasonTooLarge
	CodeInvalidField       = "invalid_field"
	CodeInvalidParameter   = "invalid_parameter"
	CodeInvalidArguments   = "invalid_arguments"
	CodeInvalidSchema      = "invalid_schema"
	CodeInvalidEventID     = "invalid_event_id"
	CodeApproverNotAllowed = "approver_not_allowed"
	CodeArgumentsChanged   = "arguments_changed"
	CodeUnknownEvent       = "unknown_event"
	CodeUnavailable        = "unavailable"
	CodeNotReady           = "not_ready"
	CodeInternal           = "internal"
)

// apiError is an error answer: an HTTP status and the body
// {"error":{"code","message","field"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// RetryAfter, in a 429 answer, is the Retry-After header's seconds,
	// for clients that read the body only.
	RetryAfter int `json:"retry_after,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func fieldError(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Status, struct {
		Error *Error `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	// Without HTML escaping: a "<" in arguments reaches API clients and the
	// CLI as "<", not "\u003c" (the answer is JSON, never HTML).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"code":"internal","message":"the response could not be encoded"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
