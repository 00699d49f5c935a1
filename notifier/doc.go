// Package notifier defines how Countersign tells people about approvals: the
// Channel interface that Slack, email, webhook and inbox delivery implement,
// the Notification a channel delivers, the Target it delivers to, and the
// Receipt the notifier publishes afterwards on hitl.notify.<channel>.<event_id>
// (stream HITL_EVENTS, spec countersign.notify.receipt/v1) for the audit
// timeline and metrics.
//
// # Flow
//
// The notifier role reads requests from HITL_REQUESTS and outcomes from
// HITL_EVENTS with durable consumers. For a request it resolves targets from
// the request snapshot (its channels and approvers) and calls Notify once per
// target; reminders go through Notify too, each with its own kind
// (KindReminder). When the arbiter announces an outcome, every target that
// showed the request gets Update, so a Slack message or inbox row stops
// offering buttons that can no longer count. Escalation tiers add targets
// that get an ordinary KindRequested notification.
//
// # At-least-once delivery
//
// A message is acknowledged only after its notifications were handed to
// their channels and the receipts published. A process killed in between
// gets the message again, so a channel may be asked to deliver the same
// notification twice, possibly concurrently from two replicas. Delivery is
// therefore at least once, never exactly once. Every Notification carries an
// IdempotencyKey, a stable function of (event_id, channel, target, kind),
// which a channel passes to the receiving side so duplicates can be
// dropped there: the webhook-id header of Standard Webhooks, the Message-ID
// of an email, the key under which a Slack message's timestamp is
// remembered. The key is the same on every replica and across restarts and
// versions; changing how it is computed would let duplicates through.
//
// Channels never decide anything: a notification only shows a request and
// links to where a decision is made. A lost or duplicated notification can
// delay an approval but cannot approve or reject it.
//
// Every channel passes the conformance suite of package notifiertest, which
// checks these guarantees against the channel's real receiving side.
//
// # Sensitive values
//
// Argument values a request lists as sensitive never leave Countersign in a
// notification: channels render ShownArguments (approval.Mask in their
// place) with SensitiveNote, and send Redacted notifications as data, except
// to a webhook endpoint configured to include them. Nothing a channel or the
// notifier logs, and no metric label, holds an argument value.
//
// This package imports only the standard library, contracts and the pure
// rules of contracts/approval; channels never import the orchestrator.
package notifier
