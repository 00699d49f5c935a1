package push

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/internal/signedtoken"
)

// This file signs the one-tap actions of a notification: each is a token
// that lets one person cast one decision on one request, over the
// arguments the notification showed, until the request's deadline. The
// scheme is the email links' (notifier/internal/signedtoken: HMAC-SHA256
// under a key id, the same configured keys) with a context of its own, so
// that no email link is ever a push action, nor the other way round.

// actionScheme is the scheme of action tokens.
var actionScheme = signedtoken.Scheme{
	Context:      "countersign-push-action:v1.",
	NonceContext: "countersign-push-nonce:v1.",
	Errors:       signedtoken.NewErrors("push", "action token"),
}

// Errors of Actions.Verify; each error matches exactly one with errors.Is.
var (
	ErrTokenMalformed = actionScheme.Errors.Malformed
	ErrUnknownKey     = actionScheme.Errors.UnknownKey
	ErrBadSignature   = actionScheme.Errors.BadSignature
	ErrTokenExpired   = actionScheme.Errors.Expired
)

// actionNamespace is the UUID namespace of the vote ids of push actions.
var actionNamespace = uuid.MustParse("1d0c5a0e-8b7f-4c1e-9a42-6f3b2d9e7c51")

// Key is one HMAC key for action tokens: an id (1 to 32 of [A-Za-z0-9_-])
// and at least 32 secret bytes; the email link keys serve. Formatting a
// Key shows its id only.
type Key = signedtoken.Key

// Actions signs and verifies action tokens. It is safe for concurrent use.
type Actions struct {
	signer *signedtoken.Signer
}

// NewActions returns Actions that sign with keys[0] and verify with any.
func NewActions(keys []Key) (*Actions, error) {
	s, err := signedtoken.New(actionScheme, keys)
	if err != nil {
		return nil, fmt.Errorf("push: actions: %w", err)
	}
	return &Actions{signer: s}, nil
}

// Action is what a token lets its bearer do: Approver casts Decision on
// EventID, over the arguments whose hash is ArgumentsSHA256, until Expires.
type Action struct {
	EventID         string
	Approver        string
	Decision        string
	ArgumentsSHA256 string
	Expires         time.Time
	Nonce           string
}

type wireAction struct {
	EventID  string `json:"evt"`
	Approver string `json:"sub"`
	Decision string `json:"dec"`
	Args     string `json:"sha"`
	Expires  int64  `json:"exp"`
	Nonce    string `json:"jti"`
}

// Complete reports whether an action token names all it must, and one of
// the two decisions a tap may cast.
func (w *wireAction) Complete() bool {
	return w.EventID != "" && w.Approver != "" && w.Nonce != "" && w.Args != "" && oneTapDecision(w.Decision)
}

// Expiry is the action's expiry in Unix seconds.
func (w *wireAction) Expiry() int64 { return w.Expires }

func oneTapDecision(d string) bool {
	return d == contracts.DecisionApprove || d == contracts.DecisionReject
}

// Sign returns the token of a: v1.<kid>.<base64url(JSON)>.<base64url(HMAC)>.
// An empty Nonce is filled with 16 random bytes.
func (a *Actions) Sign(c Action) (string, error) {
	if c.EventID == "" || c.Approver == "" || c.Expires.IsZero() || c.ArgumentsSHA256 == "" || !oneTapDecision(c.Decision) {
		return "", errors.New("push: sign action: event id, approver, approve or reject, arguments hash and expiry are required")
	}
	if c.Nonce == "" {
		n, err := signedtoken.RandomNonce()
		if err != nil {
			return "", fmt.Errorf("push: sign action: %w", err)
		}
		c.Nonce = n
	}
	return a.signer.Sign(wireAction{c.EventID, c.Approver, c.Decision, c.ArgumentsSHA256, c.Expires.Unix(), c.Nonce})
}

// Verify checks a token's signature and expiry at now. A genuine, expired
// token returns its action with ErrTokenExpired; any other error none.
func (a *Actions) Verify(token string, now time.Time) (Action, error) {
	var w wireAction
	err := a.signer.Verify(token, now, &w)
	if err != nil && !errors.Is(err, ErrTokenExpired) {
		return Action{}, err
	}
	return Action{EventID: w.EventID, Approver: w.Approver, Decision: w.Decision, ArgumentsSHA256: w.Args,
		Expires: time.Unix(w.Expires, 0).UTC(), Nonce: w.Nonce}, err
}

// nonceFor derives the nonce of the action decision in the delivery with
// idempotency key key: a redelivered notification carries the same
// tokens, hence the same vote ids. Keyed with the signing secret, so vote
// ids cannot be guessed.
func (a *Actions) nonceFor(key, decision string) string { return a.signer.Nonce(key + "\n" + decision) }

// VoteID is the id of the vote an action casts: a UUID (version 5) of its
// nonce. The arbiter counts a vote id once, so a second tap (or a token
// posted twice) casts nothing more and answers the same.
func VoteID(c Action) string { return uuid.NewSHA1(actionNamespace, []byte(c.Nonce)).String() }

// OneTap reports whether a notification of req may carry Approve and
// Reject actions: a tool call whose rule allows both without an edit, and
// asks for no passkey (only the inbox can sign one).
func OneTap(req *contracts.ApprovalRequested) bool {
	return req.Kind == contracts.KindToolApproval && req.ToolCall != nil && !notifier.NeedsPasskey(req) &&
		slices.Contains(req.AllowedDecisions, contracts.DecisionApprove) &&
		slices.Contains(req.AllowedDecisions, contracts.DecisionReject)
}
