// Package signedtoken is the one scheme behind the channels' signed
// tokens: the personal links of emails and the one-tap actions of push
// notifications. A token is
//
//	v1.<kid>.<base64url(JSON claims)>.<base64url(HMAC-SHA256(key, context + kid + "." + payload))>
//
// where payload is the third field as it appears in the token, base64url is
// unpadded, and context is the Scheme's own, so that a key never signs one
// scheme's token as another's. Keys are rotated by id: a Signer signs with
// its first key and verifies with any of them.
//
// Verify returns exactly one of four kinds of error (ErrMalformed,
// ErrUnknownKey, ErrBadSignature, ErrExpired), worded by the scheme, and
// never the token. A genuine but expired token still fills its claims.
//
// Nonce derives the nonce of a delivery from its idempotency key, keyed
// with the signing secret: a redelivery carries the same token, and the
// vote ids derived from nonces cannot be guessed.
package signedtoken
