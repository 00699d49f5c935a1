// Package events is Countersign's JetStream plumbing: it provisions the
// streams and buckets of the contract (idempotently, at every start-up),
// publishes messages with de-duplication ids, and runs the one consume loop
// every role uses. The loop maps a handler's result to Ack, Nak with a delay,
// or Term, and copies a message it gives up on to hitl.deadletter.<stream>
// before terminating it, so a poison message is kept for operators and never
// redelivered forever.
package events
