// A worker process of the AI SDK resume test. "suspend" runs the model with
// Countersign's toolApproval and stores the conversation as an app would
// ([prompt, ...result.response.messages], JSON in a file), then exits.
// "resume" builds everything afresh, reads only that file, waits for
// Countersign's decisions and calls the model again.
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { generateText, stepCountIs, tool, type ModelMessage } from 'ai';
import { z } from 'zod';
import { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/ai-sdk';
import { scriptedAiModel } from './models.js';

const [mode, file, runId, callsJSON, logFile] = process.argv.slice(2);
const cs = new Countersign({ agent: 'ts-ai-agent' }); // COUNTERSIGN_URL, COUNTERSIGN_TOKEN
const g = gate(cs, { run: { id: runId!, requested_by: 'carol' } });
const tools = g.tools({
  payments_send: tool({
    description: 'Send a payment',
    inputSchema: z.object({ amount: z.number(), recipient: z.string() }),
    execute: async (args) => {
      appendFileSync(logFile!, JSON.stringify(args) + '\n');
      return `sent ${args.amount} to ${args.recipient}`;
    },
  }),
});
const { model } = scriptedAiModel(JSON.parse(callsJSON!));

if (mode === 'suspend') {
  const prompt: ModelMessage = { role: 'user', content: 'Pay invoice 42' };
  const result = await generateText({ model, tools, messages: [prompt], toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
  writeFileSync(file!, JSON.stringify([prompt, ...result.response.messages]));
  process.stdout.write(JSON.stringify({ requests: result.content.filter((p) => p.type === 'tool-approval-request').length }));
} else {
  const messages = JSON.parse(readFileSync(file!, 'utf8')) as ModelMessage[];
  const responses = await g.approvalResponses(messages);
  if (responses) messages.push(responses);
  const result = await generateText({ model, tools, messages, toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
  process.stdout.write(JSON.stringify({ text: result.text }));
}
