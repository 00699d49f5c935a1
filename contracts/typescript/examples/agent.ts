// An agent loop with no framework: the model's tool calls (here in OpenAI's
// and Anthropic's shapes, as the APIs return them) are gated one by one.
// Run it next to `make run`:
//
//   COUNTERSIGN_URL=http://127.0.0.1:8080 COUNTERSIGN_TOKEN=$(cat ../../../data/dev-token) \
//     node build-test/examples/agent.js
//
// then approve, edit or reject `payments.send` in the inbox or with
// `countersign approvals approve <event_id>`.
import { Countersign, CountersignError, type AnyToolCall } from '@countersign/client';

const cs = new Countersign({ agent: 'billing-bot' });
const run = { id: 'example-run-1', requested_by: 'carol', labels: { env: 'dev' } };

const tools: Record<string, (args: Record<string, unknown>) => Promise<string>> = {
  search_web: async (args) => `3 results for ${String(args.q)}`,
  'payments.send': async (args) => `sent ${String(args.amount)} ${String(args.currency)} to ${String(args.recipient)}`,
};

// What a model returned: one OpenAI tool call and one Anthropic tool_use block.
const calls: AnyToolCall[] = [
  { id: 'call_1', type: 'function', function: { name: 'search_web', arguments: '{"q":"Globex invoice"}' } },
  { type: 'tool_use', id: 'toolu_2', name: 'payments.send', input: { amount: 1250, currency: 'EUR', recipient: 'Globex GmbH' } },
];

for (const call of calls) {
  try {
    const out = await cs.run(run, call, (args) => {
      const name = 'function' in call ? call.function.name : (call as { name: string }).name;
      return tools[name]!(args);
    });
    // Either the tool's output or, when it did not run, the reason: both go back to the model.
    console.log(out.result.tool_call_id, out.result.verdict, out.ran ? out.output : out.result.reason);
  } catch (err) {
    if (err instanceof CountersignError) console.error(`countersign: ${err.code} (${err.status}): ${err.message}`);
    throw err;
  }
}
