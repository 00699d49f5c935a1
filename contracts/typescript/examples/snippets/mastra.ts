import { Mastra } from '@mastra/core';
import { Agent } from '@mastra/core/agent';
import { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/mastra';

const g = gate(new Countersign({ agent: 'billing-bot' }), { run: { requested_by: user } }); // run id: Mastra's runId
const pay = g.tool({ id: 'payments_send', description: 'Send a payment', inputSchema, execute: sendPayment });
const mastra = new Mastra({ agents: { billing: new Agent({ id: 'billing', name: 'Billing', instructions: 'Pay invoices.', model, tools: { payments_send: pay } }) }, storage });
const out = await mastra.getAgent('billing').generate('Pay invoice 42'); // suspends while a human decides
if (out.finishReason === 'suspended' && out.runId) {
  console.log((await g.resume(mastra.getAgent('billing'), out.runId))?.text); // on any worker, once decided
}
