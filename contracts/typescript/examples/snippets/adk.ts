import { LlmAgent, Runner } from '@google/adk';
import { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/adk';

const g = gate(new Countersign({ agent: 'billing-bot' }), { run: { requested_by: user } }); // run id: the session id
const pay = g.tool({ name: 'payments_send', description: 'Send a payment', parameters, execute: sendPayment });
const runner = new Runner({ appName: 'billing', agent: new LlmAgent({ name: 'billing', model, tools: [pay] }), sessionService });
for await (const e of runner.runAsync({ userId, sessionId, newMessage })) {}  // pauses while a human decides
for await (const e of g.resume(runner, { userId, sessionId })) {}             // on any worker, once decided
