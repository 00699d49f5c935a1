// Package arbiter is the arbiter role: the only writer of the hitl_approvals
// bucket, run by `countersign serve` (roles arbiter) in any number of
// replicas. It turns
// requests into pending records, applies votes and commands (claim, cancel,
// extend) with compare-and-set on the record's KV revision, records refused
// votes with their reason, and announces each terminal outcome once on
// hitl.approval.decided.<event_id>.
//
// The rules of an approval live in package contracts/approval as pure
// functions (approval.ApplyVote, approval.ApplyCommand, approval.Expire,
// approval.Escalate) with no I/O, shared with every surface that checks a
// vote before sending it; Arbiter wraps them with durable consumers and KV
// writes. Any number of
// arbiter replicas may share the durable consumers: compare-and-set makes the
// first valid terminal transition win, so a record never has two outcomes,
// and a message handled twice changes nothing the second time.
//
// A request's snapshot is not taken on trust: the arbiter evaluates the
// request's call under the policy version the request names (Config.Policies,
// the built-in default, or a version applied to hitl_policy) and refuses a
// snapshot that asks for less (policy.VerifyRequest). A refused request's
// record is created rejected, decided by "countersign", with the outcome
// reason "request_refused:<refusal>", so it can never be approved and a
// waiting run learns of it at once (RefusedRecord).
//
// An edit's arguments must satisfy the request's tool_schema and an accepted
// answer's content its question.schema (JSON Schema, compiled without
// fetching anything); a vote that fails is refused as invalid_arguments with
// the failing value's JSON pointer in the refused vote's detail.
package arbiter
