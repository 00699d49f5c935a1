// Package approval holds the rules of an approval, as pure functions of a
// record, a message and a time, with no I/O: the state machine (NewRecord,
// ApplyVote, ApplyVoteWithin, ApplyCommand, Expire, Escalate), the checks of
// requests and votes against their schemas (ValidateRequest,
// CheckVoteContent, CompileSchema), the RFC 6902 diff of an edit, and the
// masking of sensitive argument values wherever arguments leave Countersign
// (Redact, RedactDiff, RedactRecord; which values, from a rule's patterns
// and a tool schema's marks: SensitivePointers). Masking never recomputes
// a hash: arguments_sha256 and the diff's paths refer to the real values.
//
// Every surface imports it: the arbiter (services/arbiter) applies the rules
// to the records it alone writes; the HTTP API, the inbox, Slack and email
// check a vote with the same rules before they send it, so a person hears
// of a refusal at once; the agent library checks schemas with them. The
// size limits and field checks every surface shares are in package
// contracts (contracts.Limits), the reason codes of a refusal too.
//
// Unlike package contracts, which is the standard library only, this
// package validates JSON Schemas with santhosh-tekuri/jsonschema.
// Package approvaltest builds requests, votes and records for tests.
package approval
