// Package push is the Web Push channel: notifications to the phones and
// browsers people subscribed through the inbox, delivered through their
// browsers' push services.
//
// A message is encrypted for one subscription (RFC 8291: aes128gcm with a
// key agreed by ECDH P-256, mixed with the subscription's auth secret), sent
// to its push resource (RFC 8030: POST with TTL, Urgency and Topic) and
// signed for the push service with the server's VAPID key (RFC 8292: an
// ES256 JWT whose aud is the endpoint's origin, at most 24 hours valid).
// A subscription the push service says is gone (404, 410) is dropped; 429
// and 5xx are retried by the notifier; any other 4xx is permanent.
//
// What a notification says is bounded by the read rule and the sensitive
// values of the request, as on every channel: the tool, the summary, the
// risk, who asks and the deadline, with sensitive values masked, and only
// to people who may read the request. Where the rule allows a one-tap
// decision (approve and reject allowed, no step-up, nothing to edit), the
// notification carries Approve and Reject actions: each a signed,
// single-use token for that person, that request and the arguments shown
// (Actions), which the inbox's service worker posts to the API to vote.
package push
