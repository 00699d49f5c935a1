// Package email is Countersign's email channel: it mails pending requests,
// reminders and outcomes over SMTP (Channel), and serves the confirmation
// pages its personal links open (NewPages).
//
// # What it guarantees
//
// An email never decides anything by being opened. A request email sent to
// an approver (Target.Approver set) carries one personal link,
// PublicURL + "/e/<token>". The token is signed with HMAC-SHA256 (Links),
// names the approval and the approver, and expires with the request (30
// days at most). Opening the link (GET or HEAD) only shows the request and
// a form: mail scanners and link previews fetch links, so a GET never votes.
// Only posting the form votes, as the approver the token names, via
// "email". A link answers once: the first vote it casts has the id
// VoteID(claims), and the arbiter counts a vote id once, so posting the form
// twice counts once, and opening the link after a counted vote shows that
// answer. A vote the arbiter refuses (the requester approving their own
// request, say) does not use the link up: the page says why it was not
// counted and shows the form again, and the next vote gets a new id
// (AttemptVoteID).
// Emails to addresses that are not an approver's carry no decision link,
// only the inbox URL.
//
// Delivery is at least once. The Message-ID of every email is derived from
// the notification's idempotency key, and so is the link's nonce: a
// redelivered notification produces the same Message-ID and the same link,
// and receivers can drop the duplicate. The outcome email replies to the
// request email (In-Reply-To and References).
//
// SMTP refusals with a 5xx code (MAIL, RCPT, DATA) are permanent
// (notifier.ErrPermanent); 4xx codes, connection, TLS and authentication
// failures and timeouts are transient. STARTTLS is required unless
// configured otherwise. Neither the SMTP password nor link tokens appear in
// logs or errors.
//
// Text written by agents (summaries, arguments, questions, names) is
// escaped in HTML and stripped of control and bidi characters everywhere.
//
// # Keys
//
// Link keys are configured as "<id>:<base64 secret>" (ParseKey), with at
// least 32 random bytes. To rotate, put the new key first and keep the old
// one until the links it signed have expired.
//
// The package smtptest runs a real SMTP server for tests.
package email
