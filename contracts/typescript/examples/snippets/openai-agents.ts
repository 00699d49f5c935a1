import { Agent, run } from '@openai/agents';
import { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/openai-agents';

const g = gate(new Countersign({ agent: 'billing-bot' }), { run: { id: runId, requested_by: user } });
const pay = g.tool({ name: 'payments_send', description: 'Send a payment', parameters, execute: sendPayment });
const agent = new Agent({ name: 'billing', instructions: 'Pay invoices.', model: openaiModel, tools: [pay] });
let result = await run(agent, 'Pay invoice 42');
if (result.interruptions.length) result = await g.resume(agent, result.state.toString()); // on any worker
