// Package slacktest is a strict fake of the parts of Slack's Web API that
// Countersign uses: chat.postMessage, chat.update, views.open and response
// URLs. It stands in for Slack in tests, since Slack cannot run here, and it
// checks every request at least as strictly as Slack does, so a test that
// passes against it has not sent anything Slack would refuse.
//
// Like Slack, it answers API errors with HTTP 200 and {"ok": false,
// "error": "<code>"}, with details in response_metadata.messages for
// invalid blocks and views. It checks:
//
//   - authentication: a bearer token (not_authed, invalid_auth);
//   - the request: JSON with a JSON content type (invalid_json,
//     json_not_object, invalid_arguments), only arguments the method knows,
//     each of the right JSON type (invalid_arguments, so a typo fails);
//   - the destination: "#name" or the id of a channel added with
//     AddChannel, a user added with AddUser (a direct message), or the
//     direct message channel Slack opened for one (channel_not_found);
//   - the message: text or blocks (no_text), text of at most 40,000
//     characters (msg_too_long), and Block Kit as documented: at most 50
//     blocks of the types header, section, context, actions, divider
//     (input only in views); every length limit of text objects, fields,
//     elements, buttons and confirmation dialogs; unique block_ids and
//     action_ids; no unknown fields (invalid_blocks). Lengths are counted
//     in UTF-16 code units, which is never less than Slack's count.
//   - updates (chat.update, replace_original): the message exists
//     (message_not_found), and a block_id kept from the version being
//     replaced names the same content; Slack asks for a new block_id on
//     every iteration of a message, and this fake enforces it;
//   - views.open: a trigger id minted by the fake (Click, Submit or
//     NewTriggerID), used once (invalid_trigger_id, expired_trigger_id),
//     and a valid modal view;
//   - response URLs: minted by the fake, used at most five times, a valid
//     message or a replace/delete of the message they belong to.
//
// It records every call (Calls), every refusal (Refused: a test asserts
// it stays empty), the current state of every message (Messages), opened
// views (Views) and response URL posts (ResponsePosts). WaitFor waits for
// a condition without sleeping: it is woken on every request.
//
// Click and Submit build signed interaction requests as Slack sends them,
// from a stored message or an opened view; FailNext makes the next call of
// a method fail (rate limits, outages, token revocation).
package slacktest
