// Package notifiertest is the conformance suite of notifier.Channel: the
// behaviours every notification channel shares, written once and run
// against each channel and the real (or, for a SaaS that cannot run in
// tests, strictly faked) server it delivers to.
//
// A channel's tests provide a Harness that builds the channel against a
// fresh receiving side and reads back what that side accepted; TestChannel
// then runs one subtest per behaviour:
//
//	func TestConformance(t *testing.T) {
//		notifiertest.TestChannel(t, notifiertest.Harness{New: newSetup, Links: true})
//	}
//
// The behaviours are those the notifier relies on whatever the medium: a
// request reaches its target and the receipt says so; it shows the
// approval; the outcome lands where the request was shown, or on its own
// when nothing was; reminders and escalations are new notifications; a
// redelivered notification is one for the receiving side; a permanent
// refusal is reported as permanent and a transient one as transient, and
// the retry delivers; an unreachable receiver and a cancelled context are
// transient; an address that can never be reached and a notification of the
// wrong kind are refused at once; no credential of the channel shows in
// what it sends, returns or logs.
//
// What is specific to one medium (Slack's Block Kit, MIME structure,
// Standard Webhooks signatures) stays in that channel's own tests.
package notifiertest
