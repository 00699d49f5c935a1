// Type-level tests of the adapters, checked by tsc (tsconfig.test.json):
// each @ts-expect-error marks a misuse the compiler must refuse, so this
// file stops compiling when a type grows loose again. Nothing here runs.
import { generateText, tool as aiTool, type InferToolOutput } from 'ai';
import { tool as lcTool } from '@langchain/core/tools';
import type { FunctionTool } from '@openai/agents';
import { z } from 'zod';
import type { Countersign, Result } from '@countersign/client';
import * as aiSdk from '@countersign/client/ai-sdk';
import * as langgraph from '@countersign/client/langgraph';
import * as openaiAgents from '@countersign/client/openai-agents';

declare const cs: Countersign;
declare const model: import('ai').LanguageModel;

/** X is exactly Y. */
type Equal<X, Y> = (<T>() => T extends X ? 1 : 2) extends <T>() => T extends Y ? 1 : 2 ? true : false;
function expectType<T extends true>(): T | void {}

export async function openaiAgentsTypes() {
  const g = openaiAgents.gate(cs, { run: { id: 'r' } });
  const t = g.tool({
    name: 'payments_send',
    description: 'Send a payment',
    parameters: z.object({ amount: z.number(), recipient: z.string() }),
    execute: async (args) => {
      // The arguments are typed from the parameters, not any.
      expectType<Equal<typeof args, { amount: number; recipient: string }>>();
      // @ts-expect-error amount is a number
      const amount: string = args.amount;
      void amount;
      return args.amount * 2;
    },
  });
  // A call that may not run returns the reason: the result is the output or a string.
  expectType<Equal<typeof t extends FunctionTool<any, any, infer R> ? R : never, number | string>>();
  g.tool({
    name: 'payments_send',
    description: 'Send a payment',
    parameters: z.object({ amount: z.number() }),
    execute: async () => 'ok',
    // @ts-expect-error the gate supplies needsApproval
    needsApproval: true,
  });
  g.tool({
    name: 'payments_send',
    description: 'Send a payment',
    parameters: z.object({ amount: z.number() }),
    // @ts-expect-error recipient is not a parameter
    execute: async (args) => args.recipient,
  });
}

export async function langgraphTypes() {
  const g = langgraph.gate(cs);
  const send = g.guard('payments_send', async (args: { amount: number }) => args.amount);
  // The wrapper returns the reason when the call may not run.
  expectType<Equal<Awaited<ReturnType<typeof send>>, number | string>>();
  // @ts-expect-error the result may be the rejection text
  const paid: number = await send({ amount: 1 });
  void paid;
  // @ts-expect-error the input keeps its type
  await send({ amount: 'all of it' });
  // The wrapper is a LangChain tool function.
  lcTool(send, { name: 'payments_send', description: 'Send a payment', schema: z.object({ amount: z.number() }) });
}

export async function aiSdkTypes() {
  const g = aiSdk.gate(cs, { run: { id: 'r' } });
  const tools = g.tools({
    add: aiTool({ description: 'Add one', inputSchema: z.object({ a: z.number() }), execute: async ({ a }) => a + 1 }),
  });
  expectType<Equal<InferToolOutput<typeof tools.add>, number | string>>();
  // @ts-expect-error the output may be the rejection text
  const n: number = null as unknown as InferToolOutput<typeof tools.add>;
  void n;
  // The guarded tools are a tool set the SDK takes.
  await generateText({ model, tools, prompt: 'Add one to 1' });

  // With onBlocked, the blocked value's type is onBlocked's.
  const h = aiSdk.gate(cs, { run: { id: 'r' }, onBlocked: (r: Result) => ({ blocked: r.verdict }) });
  const typed = h.tools({
    add: aiTool({ description: 'Add one', inputSchema: z.object({ a: z.number() }), execute: async ({ a }) => a + 1 }),
  });
  expectType<Equal<InferToolOutput<typeof typed.add>, number | { blocked: Result['verdict'] }>>();
  // Without onBlocked the blocked value is the reason, a string.
  expectType<Equal<typeof g, aiSdk.Gate<string>>>();
  // @ts-expect-error a blocked value of another type needs its onBlocked
  aiSdk.gate<number>(cs, { run: { id: 'r' } });
}
