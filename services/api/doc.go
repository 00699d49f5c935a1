// Package api is Countersign's HTTP edge: a JSON API over the approval
// records and streams, served with the standard library's pattern router.
//
// The web inbox (package services/inbox) is served on the same server and
// reaches the records only through the exported methods of Server
// (AuthenticateSum, Record, Records, Timeline, Follow, Resolver), so every
// rule about who may read or decide what holds for both.
//
// Agents submit tool calls for review (POST /v1/reviews) and may long-poll
// for the verdicts; approvers list, read, and decide approvals; runners claim
// an approval right before executing; anyone authenticated can read an
// approval's timeline or follow every change as Server-Sent Events.
//
// Guarantees:
//   - Identity comes from the bearer token only. Tokens are configured
//     (Config.Tokens, or users' tokens in the approver directory) as SHA-256
//     hashes, compared in constant time, and never logged. A vote is cast in
//     the name of the token's subject, or of the directory user who owns the
//     token; a vote body that names an approver is refused.
//   - The API never writes an approval record. Votes and commands are
//     published to JetStream with their id as Nats-Msg-Id (so a retried
//     request is stored once) and the arbiter decides; the API waits a few
//     seconds for the arbiter's answer and reports it, or reports the vote
//     as in flight.
//   - Input is decoded strictly: unknown fields and wrong types are refused
//     with the JSON path of the offending field, bodies over 1 MiB with 413,
//     and every error has the shape {"error":{"code","message","field"}}
//     with a stable code.
package api
