// The agent the OpenAI Agents SDK tests run, in this process or in a worker
// process: a scripted model that calls payments_send and lookup_invoice,
// tools gated by Countersign, and a log of every execution.
import { appendFileSync } from 'node:fs';
import { Agent, setTracingDisabled } from '@openai/agents';
import { z } from 'zod';
import type { Countersign } from '@countersign/client';
import { gate } from '@countersign/client/openai-agents';
import { ScriptedAgentsModel, type ScriptedCall } from './models.js';

setTracingDisabled(true);

export function makeAgent(cs: Countersign, runId: string, calls: ScriptedCall[], log: (entry: string) => void) {
  const g = gate(cs, { run: { id: runId, requested_by: 'carol' } });
  const model = new ScriptedAgentsModel(calls);
  const agent = new Agent({
    name: 'billing',
    instructions: 'Pay invoices.',
    model,
    tools: [
      g.tool({
        name: 'payments_send',
        description: 'Send a payment',
        parameters: z.object({ amount: z.number(), recipient: z.string() }),
        execute: async (args) => {
          log(JSON.stringify({ tool: 'payments_send', args }));
          return `sent ${args.amount} to ${args.recipient}`;
        },
      }),
      g.tool({
        name: 'lookup_invoice',
        description: 'Find an invoice',
        parameters: z.object({ n: z.number() }),
        execute: async (args) => {
          log(JSON.stringify({ tool: 'lookup_invoice', args }));
          return `invoice ${args.n}: 1250 EUR`;
        },
      }),
    ],
  });
  return { agent, g, model };
}

/** A log kept in a file, shared by the processes of one test. */
export const fileLog = (file: string) => (entry: string) => appendFileSync(file, entry + '\n');
