// Package slack shows approvals in Slack and takes votes from its buttons
// and modals.
//
// It has three parts:
//
//   - Channel implements notifier.Channel: Notify posts a request with
//     chat.postMessage (Approve, Reject and, where the request allows them,
//     Edit…, Respond…, or Answer… and Decline for a question), Update
//     replaces that message with the outcome through chat.update and removes
//     its buttons. Receipt refs are "<conversation id>/<message ts>".
//   - Interactions is the HTTP handler for Slack's interactivity requests
//     (mounted at POST /slack/interactions). It verifies Slack's signature
//     over the raw body before reading anything in it, maps the Slack user
//     to a Countersign approver through the directory, and casts the vote
//     through a notifier.Resolver. Slack waits at most three seconds for an
//     answer: button votes are cast in the background after an immediate
//     200, modal submissions wait about two seconds for the arbiter.
//     "Approve all of this run" (on every tool request of a run) approves
//     the run's pending calls the clicker may decide through
//     notifier.Resolver.DecideRun, with vote ids derived from the click so
//     that Slack's retry casts nothing twice, and lists each result on the
//     clicked message.
//   - RequestMessage and OutcomeMessage render the messages; both the
//     channel and the handler use them, so a message looks the same however
//     it was last written.
//
// # Guarantees
//
//   - No request is acted on unless its X-Slack-Signature is valid for the
//     configured signing secret and its timestamp is within five minutes of
//     the clock (Verify). An empty secret verifies nothing.
//   - A button carries only the approval id and the hash of the arguments it
//     showed; who votes is the signed Slack user, mapped through the
//     directory. A vote is counted by the arbiter against the arguments the
//     approver saw: a button under outdated arguments is refused as stale.
//   - Everything a message shows from a request is escaped for Slack's
//     mrkdwn (& < >), so a summary or argument cannot mention @channel or
//     forge a link, and it is cut to Slack's limits, so a huge argument
//     cannot make Slack refuse the message.
//   - Tokens, secrets and request bodies are never logged nor put in errors.
//
// Slack itself cannot run in tests: the slacktest package is a strict fake
// of the parts of its Web API used here.
package slack
