// Package dispatch is the notifier role: it reads approval requests and
// outcomes from the bus with durable consumers shared by any number of
// replicas, turns each into notifications for the targets its rule routes
// to (see contracts.ParseRoute), hands them to the channels (Slack, email,
// webhooks), and publishes a receipt for every delivery on
// hitl.notify.<channel>.<event_id>.
//
// # Delivery
//
// Every target of a request is delivered to on its own goroutine, with its
// own retries (exponential backoff with jitter, honouring a channel's
// Retry-After), so a channel that is down never delays the others. A
// permanent failure, or a transient one that outlasts the retries, ends
// with a failed receipt and a dead-letter copy of the notification on
// hitl.deadletter.<stream>. The bus message is acknowledged only when every
// target has a receipt; until then it is kept alive (in-progress acks) and,
// if the process dies, redelivered to another replica.
//
// # No double posts
//
// Before delivering, the dispatcher reads the receipts already published for
// the approval and skips every target whose notification of that kind
// (its idempotency key) was delivered or failed for good. A notifier killed
// after delivering but before publishing the receipt can still deliver twice;
// the idempotency key travels with the notification (webhook-id, Message-ID)
// so that receivers can drop the duplicate.
//
// # Outcomes
//
// When the arbiter announces an outcome, every target that was shown the
// request gets the channel's Update (the Slack message loses its buttons and
// shows who decided; email and webhooks get the outcome), using the Ref of
// the delivered receipt. A request decided before it was delivered anywhere
// is not delivered at all.
package dispatch
