// Package auditsink streams the audit log (HITL_AUDIT) to SIEMs: to HTTPS
// endpoints, signed per Standard Webhooks like the webhook channel, and to
// syslog receivers over TLS (RFC 5425 framing, RFC 5424 messages), each
// entry as an OCSF event or in the log's own form.
//
// Delivery is at least once: each sink has its own durable consumer
// (audit-sink-<name>), and an entry is acknowledged only after the sink
// accepted it (a 2xx, or a message written to the syslog connection). A
// failing sink is retried with a doubling backoff; an entry it refuses (a
// 4xx other than 408 and 429) or that fails Attempts times is copied to
// hitl.deadletter.HITL_AUDIT and logged, never retried forever. One sink's
// trouble holds back no other sink, and never the arbiter, which appends to
// the stream whoever reads it. A sink receives the entries of its Tenants
// only, by the webhook endpoints' rule; entries hold no arguments, comments
// or answers (docs/audit.md), so a sink learns no more than an auditor.
package auditsink
