// Package contracts holds Countersign's wire contract: the messages that travel on
// NATS JetStream, the approval record kept in the hitl_approvals bucket, the
// subject and bucket names, and canonical hashing of tool arguments.
//
// Field names and spec strings are the contract shared with clients in every
// language (JSON Schemas live under schema/, golden files under testdata/).
// The package imports only the standard library, and nothing else in the
// module is imported here: every other package depends on contracts, never
// the other way round.
package contracts
