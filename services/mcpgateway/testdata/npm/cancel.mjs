// A TypeScript SDK client that cancels a tools/call while `countersign mcp`
// waits for a human: it calls delete_note with the arguments given, aborts
// the call at its first progress notification (the SDK then sends
// notifications/cancelled) and prints one JSON line. It closes the
// transport when its stdin ends: over HTTP closing it aborts the requests
// still being sent (the cancellation among them), and on stdio it ends
// the gateway's process (SIGTERM 2 s after its stdin, SIGKILL 2 s later),
// which a loaded machine may not leave time to pass the cancellation on.
//
//   node cancel.mjs stdio BINARY UPSTREAM RUN_ID ARGS   (the gateway on its stdio)
//   node cancel.mjs http URL TOKEN ARGS                 (a gateway's Streamable HTTP endpoint)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, ...rest] = process.argv.slice(2);
let transport, args;
if (mode === "stdio") {
  const [binary, upstream, runID, a] = rest;
  args = a;
  transport = new StdioClientTransport({
    command: binary,
    args: ["mcp", "--name", "notes", "--run-id", runID, "--progress-every", "100ms", "--log-level", "warn", "--", upstream],
    env: process.env,
    stderr: "inherit",
  });
} else {
  const [url, token, a] = rest;
  args = a;
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
}
const client = new Client({ name: "ts-cancel-client", version: "1.0.0" });
await client.connect(transport);
const abort = new AbortController();
let error = null;
try {
  await client.callTool({ name: "delete_note", arguments: JSON.parse(args) }, undefined, {
    signal: abort.signal, timeout: 120000,
    onprogress: () => abort.abort("the user stopped the agent"),
  });
} catch (e) {
  error = String(e);
}
console.log(JSON.stringify({ step: "aborted", error }));
process.stdin.resume();
await new Promise((resolve) => process.stdin.on("end", resolve));
await client.close();
