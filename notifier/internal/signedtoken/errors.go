package signedtoken

import "errors"

// The kinds of error of Verify. Each error Verify returns matches exactly
// one of them with errors.Is, and exactly one of its Scheme's Errors.
var (
	// ErrMalformed: the text is not a token of this version and scheme.
	ErrMalformed = errors.New("malformed token")
	// ErrUnknownKey: the token names a key id that is not configured (a
	// retired key, or a token from another installation).
	ErrUnknownKey = errors.New("token signed with an unknown key")
	// ErrBadSignature: the token was altered or not signed by us.
	ErrBadSignature = errors.New("token signature does not match")
	// ErrExpired: the token is genuine but its time is up.
	ErrExpired = errors.New("token expired")
)

// Errors are the four errors of one scheme, in its own words.
type Errors struct {
	Malformed, UnknownKey, BadSignature, Expired error
}

// NewErrors words the four kinds for the tokens a package calls noun:
// NewErrors("email", "link token").Expired reads "email: link token
// expired" and matches ErrExpired.
func NewErrors(pkg, noun string) Errors {
	return Errors{
		Malformed:    &kindError{pkg + ": malformed " + noun, ErrMalformed},
		UnknownKey:   &kindError{pkg + ": " + noun + " signed with an unknown key", ErrUnknownKey},
		BadSignature: &kindError{pkg + ": " + noun + " signature does not match", ErrBadSignature},
		Expired:      &kindError{pkg + ": " + noun + " expired", ErrExpired},
	}
}

// kindError is one kind of error in a scheme's words.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }
