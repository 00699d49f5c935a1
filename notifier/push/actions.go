package push

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// This file signs the one-tap actions of a notification: each is a token
// that lets one person cast one decision on one request, over the
// arguments the notification showed, until the request's deadline. The
// scheme is the email links' (HMAC-SHA256 under a key id, the same
// configured keys) with a context of its own, so that no email link is
// ever a push action, nor the other way round.

// Errors of Actions.Verify; each error matches exactly one with errors.Is.
var (
	ErrTokenMalformed = errors.New("push: malformed action token")
	ErrUnknownKey     = errors.New("push: action token signed with an unknown key")
	ErrBadSignature   = errors.New("push: action token signature does not match")
	ErrTokenExpired   = errors.New("push: action token expired")
)

const (
	actionVersion = "v1"
	// actionContext is prefixed to what a token's HMAC covers.
	actionContext = "countersign-push-action:v1."
	// actionNonceContext derives a delivery's deterministic nonce.
	actionNonceContext = "countersign-push-nonce:v1."
	maxActionToken     = 2048
	// minSecretLen is the shortest key secret, as for email links.
	minSecretLen = 32
)

// actionNamespace is the UUID namespace of the vote ids of push actions.
var actionNamespace = uuid.MustParse("1d0c5a0e-8b7f-4c1e-9a42-6f3b2d9e7c51")

// Key is one HMAC key for action tokens: an id (1 to 32 of [A-Za-z0-9_-])
// and at least 32 secret bytes; the email link keys serve.
type Key struct {
	ID     string
	Secret []byte
}

// String shows the key id only.
func (k Key) String() string { return "push.Key{ID: " + k.ID + ", Secret: <redacted>}" }

// GoString is String.
func (k Key) GoString() string { return k.String() }

// Actions signs and verifies action tokens. It is safe for concurrent use.
type Actions struct {
	signer Key
	keys   map[string][]byte
}

// NewActions returns Actions that sign with keys[0] and verify with any.
func NewActions(keys []Key) (*Actions, error) {
	if len(keys) == 0 {
		return nil, errors.New("push: actions: at least one key is required")
	}
	a := &Actions{keys: map[string][]byte{}}
	for _, k := range keys {
		if len(k.ID) == 0 || len(k.ID) > 32 || !contracts.ValidEventID(k.ID) {
			return nil, fmt.Errorf("push: actions: key id %q: want 1 to 32 of A-Z a-z 0-9 _ -", k.ID)
		}
		if len(k.Secret) < minSecretLen {
			return nil, fmt.Errorf("push: actions: key %q: secret has %d bytes, want at least %d", k.ID, len(k.Secret), minSecretLen)
		}
		if _, dup := a.keys[k.ID]; dup {
			return nil, fmt.Errorf("push: actions: key id %q is used twice", k.ID)
		}
		a.keys[k.ID] = slices.Clone(k.Secret)
	}
	a.signer = Key{ID: keys[0].ID, Secret: a.keys[keys[0].ID]}
	return a, nil
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

// Sign returns the token of a: v1.<kid>.<base64url(JSON)>.<base64url(HMAC)>.
// An empty Nonce is filled with 16 random bytes.
func (a *Actions) Sign(c Action) (string, error) {
	if c.EventID == "" || c.Approver == "" || c.Expires.IsZero() || c.ArgumentsSHA256 == "" ||
		(c.Decision != contracts.DecisionApprove && c.Decision != contracts.DecisionReject) {
		return "", errors.New("push: sign action: event id, approver, approve or reject, arguments hash and expiry are required")
	}
	if c.Nonce == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		c.Nonce = base64.RawURLEncoding.EncodeToString(b[:])
	}
	data, err := json.Marshal(wireAction{c.EventID, c.Approver, c.Decision, c.ArgumentsSHA256, c.Expires.Unix(), c.Nonce})
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(data)
	return actionVersion + "." + a.signer.ID + "." + payload + "." + b64(actionMAC(a.signer.Secret, a.signer.ID, payload)), nil
}

// Verify checks a token's signature and expiry at now. A genuine, expired
// token returns its action with ErrTokenExpired; any other error none.
func (a *Actions) Verify(token string, now time.Time) (Action, error) {
	if len(token) > maxActionToken {
		return Action{}, ErrTokenMalformed
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != actionVersion || parts[2] == "" {
		return Action{}, ErrTokenMalformed
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(sig) != sha256.Size {
		return Action{}, ErrTokenMalformed
	}
	secret, ok := a.keys[parts[1]]
	if !ok {
		return Action{}, ErrUnknownKey
	}
	if !hmac.Equal(sig, actionMAC(secret, parts[1], parts[2])) {
		return Action{}, ErrBadSignature
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[2])
	var w wireAction
	if err != nil || contracts.Decode(data, &w) != nil || w.EventID == "" || w.Approver == "" || w.Nonce == "" ||
		w.Expires == 0 || w.Args == "" || (w.Decision != contracts.DecisionApprove && w.Decision != contracts.DecisionReject) {
		return Action{}, ErrTokenMalformed
	}
	c := Action{EventID: w.EventID, Approver: w.Approver, Decision: w.Decision, ArgumentsSHA256: w.Args,
		Expires: time.Unix(w.Expires, 0).UTC(), Nonce: w.Nonce}
	if !now.Before(c.Expires) {
		return c, ErrTokenExpired
	}
	return c, nil
}

// nonceFor derives the nonce of the action decision in the delivery with
// idempotency key key: a redelivered notification carries the same
// tokens, hence the same vote ids. Keyed with the signing secret, so vote
// ids cannot be guessed.
func (a *Actions) nonceFor(key, decision string) string {
	h := hmac.New(sha256.New, a.signer.Secret)
	h.Write([]byte(actionNonceContext + key + "\n" + decision))
	return b64(h.Sum(nil)[:16])
}

func actionMAC(secret []byte, kid, payload string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(actionContext + kid + "." + payload))
	return h.Sum(nil)
}

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
