// The Mastra agent of the tests: a scripted model, a guarded payments tool
// and an allowed lookup, in a Mastra instance whose storage (libSQL in a
// file) keeps suspended runs for any process that opens it.
import { Mastra } from '@mastra/core';
import { Agent } from '@mastra/core/agent';
import { LibSQLStore } from '@mastra/libsql';
import { z } from 'zod';
import type { Countersign } from '@countersign/client';
import { gate, receiptOf } from '@countersign/client/mastra';
import { scriptedAiModel, type ScriptedCall } from '../models.js';

export interface Ran {
  tool: string;
  args: unknown;
  receipt?: string;
}

/**
 * The AI SDK model of test/models.ts (the SDK's MockLanguageModelV4), which
 * also streams the same script: Mastra generates with doGenerate and
 * resumes with doStream.
 */
export function streamingModel(calls: ScriptedCall[]) {
  const { model } = scriptedAiModel(calls);
  const generate = model.doGenerate.bind(model);
  model.doStream = async (opts) => {
    const r = await generate(opts);
    const parts: any[] = [{ type: 'stream-start', warnings: [] }];
    for (const c of r.content) {
      if (c.type === 'text') parts.push({ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: c.text }, { type: 'text-end', id: 't' });
      else parts.push(c);
    }
    parts.push({ type: 'finish', finishReason: r.finishReason, usage: r.usage });
    return { stream: new ReadableStream({ start: (ctl) => { for (const p of parts) ctl.enqueue(p); ctl.close(); } }) };
  };
  // The same LanguageModelV4 at runtime; ai's and Mastra's copies of @ai-sdk/provider type it apart.
  return model as unknown as ConstructorParameters<typeof Agent>[0]['model'];
}

/** The agent (registered with a Mastra over storage at dbFile) and its gate; onRun hears each tool run and may throw to fail it. */
export function makeMastraAgent(cs: Countersign, dbFile: string, calls: ScriptedCall[], onRun: (r: Ran) => void) {
  const g = gate(cs, { run: { requested_by: 'carol' } });
  const pay = g.tool({
    id: 'payments_send',
    description: 'Send a payment',
    inputSchema: z.object({ amount: z.number(), recipient: z.string() }),
    execute: async (args, context) => {
      onRun({ tool: 'payments_send', args, receipt: receiptOf(context) });
      return `sent ${args.amount} to ${args.recipient}`;
    },
  });
  const lookup = g.tool({
    id: 'lookup_invoice',
    description: 'Find an invoice',
    inputSchema: z.object({ n: z.number() }),
    execute: async (args) => {
      onRun({ tool: 'lookup_invoice', args });
      return `invoice ${args.n}: 1250 EUR`;
    },
  });
  const billing = new Agent({ id: 'billing', name: 'Billing', instructions: 'Pay invoices.', model: streamingModel(calls), tools: { payments_send: pay, lookup_invoice: lookup } });
  const mastra = new Mastra({ agents: { billing }, storage: new LibSQLStore({ id: 'countersign-test', url: `file:${dbFile}` }), logger: false });
  return { g, agent: mastra.getAgent('billing') };
}
