// Package webhook is Countersign's webhook channel: it POSTs approval events
// to configured HTTP endpoints as Standard Webhooks (standardwebhooks.com,
// v1, symmetric signatures), and gives receivers Verify to check them.
//
// # What is sent
//
// Each notification is one POST of a JSON body to the endpoint whose Name is
// the target's address (targets never hold URLs). The body is the contract's
// event, unchanged:
//
//   - for a request or a reminder (Notify), the contracts.ApprovalRequested
//     snapshot (spec countersign.approval.requested/v1 or
//     countersign.human_input.requested/v1);
//   - for an outcome (Update), a contracts.Decided (spec
//     countersign.approval.decided/v1) built from the terminal record; its
//     revision is 0.
//
// Receivers accept unknown fields, as with every Countersign contract.
//
// The headers are:
//
//	content-type          application/json
//	user-agent            Countersign-Webhook/1
//	webhook-id            the notification's idempotency key (32 hex digits)
//	webhook-timestamp     unix seconds of this attempt
//	webhook-signature     "v1,<base64>", one per secret, space-separated
//	countersign-kind      requested, reminder.<n> or decided
//	countersign-event-id  the approval's event_id
//
// webhook-id is notifier.Notification.IdempotencyKey: the same for every
// attempt, replica and restart that delivers the same notification, and
// different for the request, each reminder and the outcome. Delivery is at
// least once, so a receiver must drop a webhook-id it has already processed.
//
// # Signing and rotation
//
// A signature is the HMAC-SHA256, under a secret's decoded key, of
// "<webhook-id>.<webhook-timestamp>.<body>" over the exact bytes sent (see
// Sign). Secrets are written "whsec_" followed by standard base64 of 24 to 64
// random bytes (see ParseSecret). An endpoint may have several secrets; each
// signs every message. To rotate, add the new secret next to the old one,
// let the receiver accept the new one, then remove the old one.
//
// # Errors and retries
//
// The channel makes one attempt per call; the notifier runtime retries. This
// package says whether a retry can help:
//
//   - any 2xx is success; the receipt's Ref is the webhook-id;
//   - 408, 429 and 5xx are transient, wrapped with notifier.RetryAfter when
//     the response has Retry-After (seconds or an HTTP date, capped at an
//     hour); network errors and an attempt's timeout (Endpoint.Timeout,
//     default 10 s) are transient too;
//   - redirects are not followed: a 3xx is permanent (notifier.ErrPermanent),
//     as are the other 4xx, an unknown endpoint name and a body that cannot
//     be encoded;
//   - 410 Gone disables the endpoint in this process (logged once) and is
//     permanent; every later notification to it fails at once without a
//     request, until the process restarts.
//
// On failure Notify and Update return the failed receipt
// (notifier.NewReceipt with the error) together with the error.
//
// Endpoint URLs may carry tokens and secrets are secrets: neither appears in
// an error or a log line. Endpoints are named by Name, and network failures
// are described without quoting the underlying error (which would name the
// URL or host).
//
// # Receiving
//
// A receiver reads the raw body, then calls Verify with its decoded secrets,
// the request headers, the body and its clock, before decoding the JSON:
//
//	key, err := webhook.ParseSecret(os.Getenv("COUNTERSIGN_WEBHOOK_SECRET"))
//	...
//	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
//	if err != nil || webhook.Verify([][]byte{key}, r.Header, body, time.Now(), 0) != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized)
//		return
//	}
//
// It then drops a webhook-id it has seen in the last few minutes and answers
// 2xx quickly. Answering 410 Gone tells this process to stop sending.
// Receivers built on another Standard Webhooks library verify the same
// messages.
package webhook
