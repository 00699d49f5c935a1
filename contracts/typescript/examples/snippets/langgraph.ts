import { tool } from '@langchain/core/tools';
import { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/langgraph';

const g = gate(new Countersign({ agent: 'billing-bot' }), { run: { requested_by: user } }); // run id: the thread_id
const pay = tool(g.guard('payments_send', sendPayment), { name: 'payments_send', description: 'Send a payment', schema: parameters });
const app = buildGraph({ approve: g.node({ tools: 'tools', agent: 'agent', schemas: [pay] }), tools: [pay] }); // agent → approve → tools
const config = { configurable: { thread_id: runId } };
await app.invoke({ messages: [{ role: 'user', content: 'Pay invoice 42' }] }, config); // suspends while a human decides
await app.invoke(await g.resume(app, config), config); // on any worker, once decided
