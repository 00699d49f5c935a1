// Package passkey is how an approver signs the call they approve, and how
// anyone checks it: the approval statement (event id, approver, tool,
// arguments hash, decision, edited arguments hash, time) in its canonical
// JSON form, whose SHA-256 is the challenge of a WebAuthn assertion by one
// of the approver's passkeys.
//
// The arbiter checks every approval of a step_up: passkey request with
// CheckVote's rules (through contracts/approval) at the moment it counts
// it; the receipt carries the assertions, and a tool's verifier checks them
// again with Verify against the approvers' published public keys, so a
// receipt the server signed alone does not pass a tool that requires
// human signatures.
//
// Only ES256 (P-256) and EdDSA (Ed25519) passkeys are accepted: every
// platform authenticator offers ES256, and both verify with the standard
// libraries of Go, TypeScript (WebCrypto) and, for Python, a few lines of
// curve arithmetic.
package passkey
