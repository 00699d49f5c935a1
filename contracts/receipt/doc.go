// Package receipt issues and verifies Countersign receipts: the
// countersignature a tool checks for itself before it runs a call.
//
// When the runner of an approved call claims it (right before execution),
// the arbiter signs a receipt: a compact JWS (RFC 7515) signed with EdDSA
// over Ed25519 (RFC 8037) whose claims name the approval (event id, tenant,
// agent, run, tool), the SHA-256 of the RFC 8785 canonical form of the
// arguments that may run, who decided and how (quorum, standing grant), the
// policy rule and version, when it was issued and when it expires (minutes
// later), and a unique id (jti) for single use.
//
// A tool — a payments API, a database proxy, an MCP server — verifies it with
// one call, Verify, given the receipt, its own name and the arguments it is
// about to run, and the issuer's public keys (a JWKS fetched from
// /.well-known/jwks.json and cached, or pinned). Verify returns the verified
// claims or an error that matches, with errors.Is, exactly one of
// ErrMissing, ErrMalformed, ErrUnknownKey, ErrBadSignature, ErrExpired,
// ErrWrongTool, ErrArgumentsDiffer, ErrReplayed or ErrWrongIssuer. Middleware
// wraps a net/http handler so that it only runs with a valid receipt for the
// exact request body. A receipt is single use within the process by
// default; ServerReplayStore makes it single use across every replica and
// restart of the tool, with Countersign's POST /v1/receipts/use.
//
// The package depends only on the standard library (crypto/ed25519) and
// the contracts package's RFC 8785 canonicalization.
package receipt
