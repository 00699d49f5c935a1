// Package mcpgateway puts Countersign's approvals in front of any Model
// Context Protocol server, with no change to the client or the server.
//
// A Gateway is an MCP server to its clients and an MCP client to one
// upstream server. Tools, resources, prompts and completions pass through,
// with their list-changed notifications and resource subscriptions; only
// tools/call is reviewed. Each call is reviewed over Countersign's HTTP
// API as the tool "<server>.<tool>" with its arguments, and the upstream's
// tool annotations are given to the policy as run labels (see Labels), so
// existing rules, conditions, quorum, channels and timeouts apply unchanged.
//
// What the package guarantees:
//
//   - Fail closed. A call reaches the upstream only when the policy allows
//     it outright or a human approved it and the gateway's claim of that
//     approval was accepted; it runs with the approved (possibly edited)
//     arguments. Anything else — a denial, a rejection, an error reaching
//     Countersign, bad arguments — is answered without calling the upstream.
//   - At most once. An approval is claimed right before the call is
//     forwarded, with a claim id of that attempt alone; the arbiter lets one
//     claim through, so of identical calls waiting on one approval, or of a
//     gateway and its restarted successor, one runs it, and the others are
//     told that an identical call ran it (verdict already_executed) — never
//     given a new approval that would run the call twice. Whether an
//     approval is used up is Countersign's record (its claim), not the
//     gateway's memory: after a restart, also after a kill -9, an identical
//     call opens a new approval.
//   - Re-attachment. The tool call id is derived from the server, the tool
//     and the canonical (RFC 8785) arguments within a run identity that
//     survives restarts, so calling again with the same arguments — after
//     the gateway answered that the call awaits approval, or after a restart
//     — finds the same approval instead of creating a second one.
//   - Cancelling cancels. A client that cancels a call waiting for a human
//     (notifications/cancelled) cancels the approval it opened (through
//     Config.Cancel, as the submitting agent), unless another identical
//     call waits on it; the gateway never re-attaches to it, and a call
//     never runs on a cancelled, expired or lapsed approval. A client that
//     merely goes away leaves the approval pending for the call to
//     re-attach to.
//   - One upstream down is one upstream down. With Config.ConnectLater a
//     gateway starts without an upstream it cannot reach, tells its clients
//     so, tries again and serves it once it answers (Gateway.Health, and
//     /metrics of Handler).
//   - Every result of a reviewed call says how it was decided, in
//     _meta.countersign (verdict, rule, event_id, grant_id, receipt).
//   - Questions reach a person. An upstream's elicitation goes to the
//     client when it supports elicitation — on protocol 2026-07-28 as an
//     input request in the answer to its tools/call, the upstream call held
//     until the client calls again with the answer — else to the approvers
//     as a human-input request, labelled as a question of the tool whose
//     call asked it (QuestionLabels), with none of a tool's hints.
//   - No broken clients. While a call waits, the gateway sends progress
//     notifications (to clients that asked for them with a progress token);
//     past Config.MaxWait it answers with a tool result naming the approval
//     and telling the model to call again with the same arguments.
package mcpgateway
