// A real MCP client (the TypeScript SDK) driving `countersign mcp` in front
// of the real filesystem server. Each step prints one JSON line; the Go test
// decides the held calls in between.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import path from "node:path";

const [binary, dir] = process.argv.slice(2);
const server = path.join(import.meta.dirname, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
const transport = new StdioClientTransport({
  command: binary,
  args: ["mcp", "--name", "files", "--run-id", "ts-run", "--max-wait", "60s", "--progress-every", "200ms",
    "--log-level", "warn", "--", process.execPath, server, dir],
  env: process.env,
  stderr: "inherit",
});
const client = new Client({ name: "ts-test-client", version: "1.0.0" });
await client.connect(transport);
const say = (step, v) => console.log(JSON.stringify({ step, ...v }));
const text = (r) => (r.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

const tools = await client.listTools();
say("list", { names: tools.tools.map((t) => t.name) });

let r = await client.callTool({ name: "read_text_file", arguments: { path: path.join(dir, "hello.txt") } });
say("read", { isError: !!r.isError, text: text(r) });

// The client's own timeout (1 s) is far shorter than the wait for a human:
// progress notifications (every 200 ms) keep the call alive. After ten of
// them (2 s) the test approves.
let progress = 0;
const opts = {
  timeout: 1000, resetTimeoutOnProgress: true,
  onprogress: () => { if (++progress === 10) say("waiting", { progress }); },
};
r = await client.callTool({ name: "write_file", arguments: { path: path.join(dir, "approved.txt"), content: "approved" } }, undefined, opts);
say("write", { isError: !!r.isError, text: text(r), progress });

r = await client.callTool({ name: "write_file", arguments: { path: path.join(dir, "rejected.txt"), content: "no" } }, undefined, opts);
say("reject", { isError: !!r.isError, text: text(r) });
await client.close();
