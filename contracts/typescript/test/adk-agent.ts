// The ADK agent of the tests: a scripted model (test/adk-model.ts), a
// guarded payments tool and an allowed lookup, run by ADK's Runner over the
// session service it is given.
import { LlmAgent, Runner, type BaseSessionService, type Event } from '@google/adk';
import { z } from 'zod';
import type { Countersign } from '@countersign/client';
import { gate, receiptOf } from '@countersign/client/adk';
import { ScriptedAdkModel, type ScriptedCall } from './adk-model.js';

export const appName = 'billing';
export const userId = 'carol';

export interface Ran {
  tool: string;
  args: unknown;
  receipt?: string;
}

/** The agent, its runner and gate; onRun hears each tool run (and may throw to fail it). */
export function makeAdkAgent(cs: Countersign, sessionService: BaseSessionService, calls: ScriptedCall[], onRun: (r: Ran) => void) {
  const g = gate(cs, { run: { requested_by: userId } });
  const pay = g.tool({
    name: 'payments_send',
    description: 'Send a payment',
    parameters: z.object({ amount: z.number(), recipient: z.string() }),
    execute: async (args, context) => {
      onRun({ tool: 'payments_send', args, receipt: receiptOf(context) });
      return { sent: `${args.amount} to ${args.recipient}` };
    },
  });
  const lookup = g.tool({
    name: 'lookup_invoice',
    description: 'Find an invoice',
    parameters: z.object({ n: z.number() }),
    execute: async (args) => {
      onRun({ tool: 'lookup_invoice', args });
      return { invoice: `${args.n}: 1250 EUR` };
    },
  });
  const model = new ScriptedAdkModel(calls);
  const agent = new LlmAgent({ name: 'billing', model, instruction: 'Pay invoices.', tools: [pay, lookup] });
  const runner = new Runner({ appName, agent, sessionService });
  return { g, runner, model };
}

/** The text the agent answered last among events. */
export function finalText(events: Event[]): string {
  return events
    .filter((e) => e.author !== 'user')
    .flatMap((e) => e.content?.parts ?? [])
    .map((p) => p.text ?? '')
    .filter(Boolean)
    .join('\n');
}

/** Every event of an ADK run. */
export async function collect(events: AsyncIterable<Event>): Promise<Event[]> {
  const out: Event[] = [];
  for await (const e of events) out.push(e);
  return out;
}
