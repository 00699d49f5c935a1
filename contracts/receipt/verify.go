package receipt

import (
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
)

// MaxReceiptBytes bounds the size of a receipt a verifier reads.
const MaxReceiptBytes = 16 << 10

// Options configure Verify.
type Options struct {
	// Keys finds the issuer's public keys: a KeySet (pinned) or a Fetcher
	// (the issuer's /.well-known/jwks.json, cached). Required.
	Keys KeySource
	// Replay remembers used receipt ids (default: one in-memory store per
	// process, DefaultReplayStore). Tools with several replicas share one
	// (a database, Redis, NATS KV) by implementing ReplayStore.
	Replay ReplayStore
	// Issuer is the iss a receipt must carry (default DefaultIssuer).
	Issuer string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Leeway is the clock skew tolerated on iat and exp (default 0).
	Leeway time.Duration
	// Bases are how a call must have been allowed for the tool to run it
	// (BasisApproval, BasisGrant, BasisPolicy); empty accepts every basis.
	// A tool that runs only what humans approved lists BasisApproval, or
	// BasisApproval and BasisGrant to also accept a standing grant.
	Bases []string
	// Humans, when set, requires the approvers' own passkey signatures
	// (ErrSignaturesMissing, ErrSignatureInvalid): a tool that runs only what
	// named people signed, which neither a compromised agent runtime nor the
	// server's key alone can mint.
	Humans *Humans
}

// Verify checks that token is a valid, unused receipt for running tool
// with args, and returns its claims. The checks, in order: the token is a
// compact JWS of type countersign-receipt+jwt with alg EdDSA; its kid names
// a key of opts.Keys (ErrUnknownKey); the signature verifies
// (ErrBadSignature); the claims are complete (ErrMalformed), from the
// expected issuer (ErrWrongIssuer), and current (ErrExpired); the tool
// matches (ErrWrongTool); the basis is one of opts.Bases, when set
// (ErrBasisNotAccepted); args hold no integer beyond ±(2^53−1), which the
// server never approves, and the SHA-256 of their RFC 8785 form equals
// args_sha256 (ErrArgumentsDiffer); and the receipt id was not used before
// (ErrReplayed) — it is then marked used, so a second Verify of the same
// receipt fails. Only a receipt that passes every other check uses up its id.
func Verify(ctx context.Context, token, tool string, args []byte, opts Options) (*Claims, error) {
	c, err := Inspect(ctx, token, opts)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(c.Tool), []byte(tool)) != 1 {
		return nil, wrap(ErrWrongTool, "the receipt is for tool %q, not %q", c.Tool, tool)
	}
	if len(opts.Bases) > 0 && !slices.Contains(opts.Bases, c.Basis) {
		return nil, wrap(ErrBasisNotAccepted, "the call was allowed by %s; this tool accepts %s", c.Basis, strings.Join(opts.Bases, ", "))
	}
	// An integer beyond ±(2^53−1) is refused as the server refuses it: the
	// hash is over its nearest double, while the tool may run the exact one.
	if err := contracts.CheckIJSON(args); err != nil {
		return nil, wrap(ErrArgumentsDiffer, "the arguments cannot be what was approved: %v", err)
	}
	sha, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		return nil, wrap(ErrArgumentsDiffer, "the arguments are not valid JSON: %v", err)
	}
	if subtle.ConstantTimeCompare([]byte(sha), []byte(c.ArgsSHA256)) != 1 {
		return nil, wrap(ErrArgumentsDiffer, "the arguments' SHA-256 is %s, the receipt allows %s", sha, c.ArgsSHA256)
	}
	if opts.Humans != nil {
		if err := checkHumans(ctx, c, opts.Humans, opts.Leeway); err != nil {
			return nil, err
		}
	}
	store := opts.Replay
	if store == nil {
		store = DefaultReplayStore
	}
	if err := store.Use(ctx, c.ID, time.Unix(c.ExpiresAt, 0).Add(opts.Leeway)); err != nil {
		return nil, err
	}
	return c, nil
}

// Inspect checks a receipt's signature, issuer and times and returns its
// claims, without checking the tool and arguments or using up its id. It is
// for audit and display; a tool calls Verify.
func Inspect(ctx context.Context, token string, opts Options) (*Claims, error) {
	if opts.Keys == nil {
		return nil, errors.New("receipt: Options.Keys is required")
	}
	if opts.Issuer == "" {
		opts.Issuer = DefaultIssuer
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, ErrMissing
	}
	if len(token) > MaxReceiptBytes {
		return nil, malformedf("longer than %d bytes", MaxReceiptBytes)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, malformedf("not a compact JWS (header.payload.signature)")
	}
	var h header
	if err := decodePart(parts[0], "header", &h); err != nil {
		return nil, err
	}
	switch {
	case h.Alg != Algorithm:
		return nil, malformedf("alg %q, want %s", h.Alg, Algorithm)
	case h.Typ != Type:
		return nil, malformedf("typ %q, want %s", h.Typ, Type)
	case h.Kid == "":
		return nil, malformedf("no kid in the header")
	case len(h.Crit) > 0:
		return nil, malformedf("critical header parameters %v are not understood", h.Crit)
	}
	pub, err := opts.Keys.Key(ctx, h.Kid)
	if err != nil {
		return nil, err
	}
	sig, err := b64.Strict().DecodeString(parts[2])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, wrap(ErrBadSignature, "the signature is not %d bytes of base64url", ed25519.SignatureSize)
	}
	if !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		return nil, wrap(ErrBadSignature, "the signature does not verify with key %q", h.Kid)
	}
	var c Claims
	if err := decodePart(parts[1], "payload", &c); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(c.Issuer), []byte(opts.Issuer)) != 1 {
		return nil, wrap(ErrWrongIssuer, "issuer %q, want %q", c.Issuer, opts.Issuer)
	}
	now := opts.Now()
	if !now.Before(time.Unix(c.ExpiresAt, 0).Add(opts.Leeway)) {
		return nil, wrap(ErrExpired, "expired at %s", time.Unix(c.ExpiresAt, 0).UTC().Format(time.RFC3339))
	}
	if now.Add(opts.Leeway).Before(time.Unix(c.IssuedAt, 0)) {
		return nil, wrap(ErrExpired, "issued in the future (%s)", time.Unix(c.IssuedAt, 0).UTC().Format(time.RFC3339))
	}
	return &c, nil
}

// decodePart decodes one base64url JSON part of the token. Duplicate keys
// are refused: two JSON readers must never see different claims.
func decodePart(s, name string, v any) error {
	data, err := b64.Strict().DecodeString(s)
	if err != nil {
		return malformedf("%s: not base64url", name)
	}
	if err := contracts.CheckDuplicateKeys(data); err != nil {
		return malformedf("%s: %v", name, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return malformedf("%s: %v", name, err)
	}
	return nil
}
