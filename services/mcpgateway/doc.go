// Package mcpgateway puts Countersign's approvals in front of any Model
// Context Protocol server, with no change to the client or the server.
//
// A Gateway is an MCP server to its clients and an MCP client to one
// upstream server. Tools, resources, prompts and completions pass through;
// only tools/call is reviewed. Each call is reviewed over Countersign's HTTP
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
//     forwarded, with a claim id unique to this gateway process; a restarted
//     gateway cannot claim an approval its predecessor claimed, so an
//     approved call runs at most once, also across a kill -9.
//   - Re-attachment. The tool call id is derived from the server, the tool
//     and the canonical (RFC 8785) arguments within a run identity that
//     survives restarts, so calling again with the same arguments — after
//     the gateway answered that the call awaits approval, or after a restart
//     — finds the same approval instead of creating a second one.
//   - No broken clients. While a call waits, the gateway sends progress
//     notifications (to clients that asked for them with a progress token);
//     past Config.MaxWait it answers with a tool result naming the approval
//     and telling the model to call again with the same arguments.
package mcpgateway
