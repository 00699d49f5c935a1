package passkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
)

// SpecStatement names the approval statement.
const SpecStatement = "countersign.statement/v1"

// TimeLayout is the statement's time format: RFC 3339, UTC, to the second.
const TimeLayout = "2006-01-02T15:04:05Z"

// MaxAge is how long after its time a statement's assertion may be counted
// as a vote; ClockSkew is how far in the future its time may be.
const (
	MaxAge    = 5 * time.Minute
	ClockSkew = 30 * time.Second
)

// Statement is what an approver signs: exactly one decision on exactly one
// call. Every field is a string, so its canonical form (RFC 8785) is the
// same in every language.
type Statement struct {
	Spec     string `json:"spec"`
	EventID  string `json:"event_id"`
	Approver string `json:"approver"`
	Tool     string `json:"tool"`
	// ArgumentsSHA256 is the hash of the arguments under review when the
	// approver decided (after any earlier approver's edit).
	ArgumentsSHA256 string `json:"arguments_sha256"`
	Decision        string `json:"decision"`
	// EditedArgumentsSHA256 is the hash of the approver's own edit, if any.
	EditedArgumentsSHA256 string `json:"edited_arguments_sha256,omitempty"`
	// At is when the statement was made (TimeLayout).
	At string `json:"at"`
}

// NewStatement is the statement of a decision made at t.
func NewStatement(eventID, approver, tool, argsSHA, decision, editedSHA string, t time.Time) Statement {
	return Statement{
		Spec: SpecStatement, EventID: eventID, Approver: approver, Tool: tool,
		ArgumentsSHA256: argsSHA, Decision: decision, EditedArgumentsSHA256: editedSHA,
		At: t.UTC().Truncate(time.Second).Format(TimeLayout),
	}
}

// Canonical is the statement's RFC 8785 JSON: what is hashed into the
// challenge, and what a vote and a receipt carry.
func (s Statement) Canonical() string {
	data, _ := json.Marshal(s) // strings only: cannot fail
	out, err := contracts.Canonicalize(data)
	if err != nil { // unreachable for valid UTF-8 strings; keep the bytes as they are
		return string(data)
	}
	return string(out)
}

// Challenge is the WebAuthn challenge that signs the statement: the
// SHA-256 of its canonical JSON.
func (s Statement) Challenge() []byte { return challengeOf(s.Canonical()) }

// ChallengeB64 is Challenge in base64url, as the browser's client data
// carries it.
func (s Statement) ChallengeB64() string {
	return base64.RawURLEncoding.EncodeToString(s.Challenge())
}

func challengeOf(canonical string) []byte {
	sum := sha256.Sum256([]byte(canonical))
	return sum[:]
}

// Effective is the hash of the arguments the statement approves to run:
// the edit's, or else those under review.
func (s Statement) Effective() string {
	if s.EditedArgumentsSHA256 != "" {
		return s.EditedArgumentsSHA256
	}
	return s.ArgumentsSHA256
}

// Time is the statement's time.
func (s Statement) Time() (time.Time, error) { return time.Parse(TimeLayout, s.At) }

// ParseStatement reads a statement in its canonical form, strictly: unknown
// fields, missing fields, another spec or a form that is not canonical are
// errors.
func ParseStatement(text string) (Statement, error) {
	var s Statement
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Statement{}, fmt.Errorf("statement: %v", err)
	}
	if s.Spec != SpecStatement {
		return Statement{}, fmt.Errorf("statement: spec %q, want %s", s.Spec, SpecStatement)
	}
	for _, f := range []struct{ name, v string }{
		{"event_id", s.EventID}, {"approver", s.Approver}, {"tool", s.Tool},
		{"arguments_sha256", s.ArgumentsSHA256}, {"decision", s.Decision}, {"at", s.At},
	} {
		if f.v == "" {
			return Statement{}, fmt.Errorf("statement: %s is required", f.name)
		}
	}
	if _, err := s.Time(); err != nil {
		return Statement{}, fmt.Errorf("statement: at %q is not %s", s.At, TimeLayout)
	}
	if s.Canonical() != text {
		return Statement{}, fmt.Errorf("statement: not in canonical form (RFC 8785)")
	}
	return s, nil
}
