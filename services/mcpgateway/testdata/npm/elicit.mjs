// A TypeScript SDK client that supports elicitation, driving `countersign
// mcp` in front of the tests' notes server (the Go test binary). It calls
// ask_name, answers the server's question with the JSON given on the
// command line, and prints what it was asked and the tool's result as one
// JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [binary, upstream, answer] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: binary,
  args: ["mcp", "--name", "notes", "--run-id", "ts-elicit", "--log-level", "warn", "--", upstream],
  env: process.env,
  stderr: "inherit",
});
const client = new Client({ name: "ts-elicit-client", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } } });
let asked = null;
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked = req.params;
  return { action: "accept", content: JSON.parse(answer) };
});
await client.connect(transport);
const r = await client.callTool({ name: "ask_name", arguments: {} });
const text = (r.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
console.log(JSON.stringify({ asked, isError: !!r.isError, text }));
await client.close();
