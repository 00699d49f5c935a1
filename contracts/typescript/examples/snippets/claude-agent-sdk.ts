import { createSdkMcpServer, query } from '@anthropic-ai/claude-agent-sdk';
import { z } from 'zod';
import { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/claude-agent-sdk';

const g = gate(new Countersign({ agent: 'billing-bot' }), { run: { id: runId, requested_by: user } });
const pay = g.tool('payments_send', 'Send a payment', { amount: z.number(), recipient: z.string() }, sendPayment);
const billing = createSdkMcpServer({ name: 'billing', tools: [pay] });
const options = { mcpServers: { billing }, canUseTool: g.canUseTool, hooks: g.hooks };
for await (const m of query({ prompt: 'Pay invoice 42', options })) {
  if (m.type === 'result' && m.subtype === 'success') console.log(m.result);
}
