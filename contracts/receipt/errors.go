package receipt

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a verification failure with a stable code. The package's
// sentinels are *Error values; a returned error wraps one of them with
// detail, so callers branch with errors.Is(err, receipt.ErrExpired) or read
// the code with errors.As.
type Error struct {
	// Code is stable and machine-readable ("receipt_expired", ...).
	Code string
	// Status is the HTTP status Middleware answers with.
	Status  int
	Message string
}

func (e *Error) Error() string { return "receipt: " + e.Message }

// The reasons a receipt is refused.
var (
	// ErrMissing: no receipt was presented.
	ErrMissing = &Error{Code: "receipt_missing", Status: http.StatusUnauthorized, Message: "no receipt"}
	// ErrMalformed: not a compact JWS receipt (bad encoding, wrong type or
	// algorithm, missing claims).
	ErrMalformed = &Error{Code: "receipt_malformed", Status: http.StatusUnauthorized, Message: "malformed receipt"}
	// ErrUnknownKey: signed with a key the verifier does not hold (never
	// published, or removed after a rotation).
	ErrUnknownKey = &Error{Code: "receipt_unknown_key", Status: http.StatusUnauthorized, Message: "unknown signing key"}
	// ErrBadSignature: the signature does not verify with the named key.
	ErrBadSignature = &Error{Code: "receipt_bad_signature", Status: http.StatusUnauthorized, Message: "bad signature"}
	// ErrWrongIssuer: signed by a key of the set, but for another issuer.
	ErrWrongIssuer = &Error{Code: "receipt_wrong_issuer", Status: http.StatusUnauthorized, Message: "wrong issuer"}
	// ErrExpired: past its exp (or issued in the future).
	ErrExpired = &Error{Code: "receipt_expired", Status: http.StatusUnauthorized, Message: "expired"}
	// ErrWrongTool: the receipt is for another tool.
	ErrWrongTool = &Error{Code: "receipt_wrong_tool", Status: http.StatusForbidden, Message: "receipt for another tool"}
	// ErrBasisNotAccepted: the call was allowed in a way the tool does not
	// accept (Options.Bases): a policy receipt where humans must approve.
	ErrBasisNotAccepted = &Error{Code: "receipt_basis_not_accepted", Status: http.StatusForbidden, Message: "call allowed on a basis the tool does not accept"}
	// ErrArgumentsDiffer: the arguments about to run are not the approved ones.
	ErrArgumentsDiffer = &Error{Code: "receipt_arguments_differ", Status: http.StatusForbidden, Message: "arguments differ from the approved ones"}
	// ErrSignaturesMissing: the tool requires approvers' own signatures
	// (Options.Humans) and the receipt carries fewer distinct signers than
	// it requires: a receipt the server signed alone.
	ErrSignaturesMissing = &Error{Code: "receipt_signatures_missing", Status: http.StatusForbidden, Message: "approvers' signatures missing"}
	// ErrSignatureInvalid: an approver's signature in the receipt does not
	// hold: it does not verify, is by an unknown or revoked passkey, is
	// stale, or signs another call, arguments or decision.
	ErrSignatureInvalid = &Error{Code: "receipt_signature_invalid", Status: http.StatusForbidden, Message: "invalid approver signature"}
	// ErrReplayed: the receipt's id was already used.
	ErrReplayed = &Error{Code: "receipt_replayed", Status: http.StatusConflict, Message: "receipt already used"}
)

func wrap(sentinel *Error, format string, a ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, a...))
}

func malformedf(format string, a ...any) error { return wrap(ErrMalformed, format, a...) }

// Code returns the stable code of a verification error ("" for nil, and
// "receipt_unavailable" for an error of no listed kind, such as a JWKS that
// could not be fetched).
func Code(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return "receipt_unavailable"
}
