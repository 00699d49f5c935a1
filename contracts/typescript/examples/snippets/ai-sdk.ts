import { generateText, stepCountIs, tool } from 'ai';
import { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/ai-sdk';

const g = gate(new Countersign({ agent: 'billing-bot' }), { run: { id: runId, requested_by: user } });
const tools = g.tools({ payments_send: tool({ description: 'Send a payment', inputSchema: parameters, execute: sendPayment }) });
// execute waits for the decision, claims, runs; a rejection becomes the tool result.
const { text } = await generateText({ model: aiModel, tools, prompt: 'Pay invoice 42', stopWhen: stepCountIs(3) });
