/**
 * Countersign for Mastra (`@mastra/core`).
 *
 *   const g = gate(cs, { run: { requested_by: user } }); // run id: Mastra's runId
 *   const pay = g.tool({ id: 'payments_send', description: 'Send a payment', inputSchema, execute: sendPayment });
 *   const agent = new Agent({ id: 'billing', name: 'Billing', instructions, model, tools: { pay } });
 *   let out = await agent.generate('Pay invoice 42');          // suspends while a human decides
 *   if (out.finishReason === 'suspended' && out.runId) await g.resume(agent, out.runId); // on any worker
 *
 * g.tool is Mastra's createTool whose execute asks Countersign first (the
 * model's toolCallId as the call id, the tool's inputSchema as JSON Schema).
 * A call the policy allows, or denies, is settled at once; a call that waits
 * for a human suspends the tool (`context.agent.suspend`, Mastra's runtime
 * suspension), and Mastra keeps the suspended run as a snapshot in the
 * Mastra instance's storage. g.resume, in any process whose Mastra reaches
 * that storage, waits for Countersign's decision on each suspended call of
 * the run and resumes it (`resumeStream`), until the run no longer suspends.
 *
 * On resume execute asks Countersign again and does not believe the resume
 * data: it claims the approval right before running, runs with the approved
 * arguments (a human's edit), reports how the call ended, and returns the
 * reason, as the tool result the model sees, for a call that may not run.
 *
 * Mastra's `requireApproval` predicate is not used: it does not see the
 * call's id, and approveToolCall cannot carry a human's edit.
 */
import type { Agent } from '@mastra/core/agent';
import { createTool, type ToolExecutionContext } from '@mastra/core/tools';
import { toJSONSchema, type ZodType } from 'zod';
import { blockedMessage, type Countersign } from './client.js';
import { guarded, objectArguments, schemaObject, type Call } from './toolcalls.js';
import type { Result, RunInfo } from './types.js';

export { receiptOf } from './toolcalls.js';

/** Options of gate. */
export interface GateOptions {
  /** The run the calls belong to; its id defaults to Mastra's runId, which g.resume takes. */
  run?: Partial<RunInfo>;
  /** What a call that may not run returns as its tool result (default: the reason). */
  onBlocked?: (result: Result) => unknown;
  /** JSON Schemas of tools' inputs by tool id, for an inputSchema that is not a zod 4 schema. */
  toolSchemas?: Record<string, Record<string, unknown>>;
}

/** What a guarded tool suspends with: the approval it waits for. */
export interface SuspendPayload {
  countersign: { event_id?: string; reason: string };
}

/** The output of a resumed run (agent.resumeStream's full output). */
export type ResumeOutput = Awaited<ReturnType<Awaited<ReturnType<Agent['resumeStream']>>['getFullOutput']>>;

/** The Countersign gate of one agent. */
export interface Gate {
  /**
   * Mastra's createTool whose execute reviews the call with Countersign:
   * allowed calls run at once; a call that waits for a human suspends; on
   * resume it claims the approval right before running, with the approved
   * arguments (the receipt: receiptOf(context)), and reports the outcome. A
   * call that may not run returns onBlocked's value (the reason).
   */
  tool: typeof createTool;
  /**
   * Resumes a suspended run on any worker: waits for Countersign's decision
   * on each suspended call of g.tool's tools and resumes it, again while the
   * run suspends on new ones. The run's final output, or undefined when the
   * run has no suspended call (finished already, or resumed elsewhere).
   */
  resume(agent: Agent<any, any, any>, runId: string, options?: { signal?: AbortSignal }): Promise<ResumeOutput | undefined>;
}

/** gate connects a Countersign client to Mastra. */
export function gate(cs: Countersign, options: GateOptions = {}): Gate {
  const onBlocked = options.onBlocked ?? blockedMessage;
  const schemas = new Map<string, Record<string, unknown> | undefined>(Object.entries(options.toolSchemas ?? {}));
  const runOf = (runId: string | undefined): RunInfo => ({ ...options.run, id: options.run?.id ?? runId });
  const callOf = (id: string | undefined, name: string, input: unknown): Call => {
    const call: Call = { id, name, arguments: objectArguments(input) };
    const schema = schemas.get(name);
    if (schema) call.tool_schema = schema;
    return call;
  };

  const tool = ((opts: Parameters<typeof createTool>[0]) => {
    const name = opts.id;
    if (!schemas.has(name)) schemas.set(name, inputJSONSchema(opts.inputSchema));
    const execute = opts.execute as ((input: unknown, context: ToolExecutionContext) => Promise<unknown>) | undefined;
    if (!execute) return createTool(opts);
    type Ctx = ToolExecutionContext & { runId?: string };
    const run = guarded(cs, execute, {
      name,
      run: (ctx) => runOf((ctx as Ctx).runId),
      schema: async () => schemas.get(name),
      callId: (ctx) => ctx?.agent?.toolCallId,
      signal: (ctx) => ctx?.abortSignal,
      perCall: 0,
      onBlocked,
    });
    return createTool({
      ...opts,
      execute: async (input: unknown, ctx: Ctx) => {
        const agent = ctx?.agent;
        // First time through (no resume data): a call that waits for a human suspends the run.
        if (agent?.suspend && agent.resumeData === undefined) {
          const [r] = await cs.review(runOf(ctx.runId), [callOf(agent.toolCallId, name, input)], { signal: ctx.abortSignal });
          if (r!.verdict === 'pending') {
            const payload: SuspendPayload = { countersign: { event_id: r!.event_id, reason: `Waiting for approval in Countersign (event ${r!.event_id}).` } };
            await agent.suspend(payload as never);
            return undefined;
          }
        }
        return run(input, ctx);
      },
    } as Parameters<typeof createTool>[0]);
  }) as typeof createTool;

  return {
    tool,

    async resume(agent, runId, opts = {}) {
      let last: ResumeOutput | undefined;
      const resumed = new Set<string>();
      for (;;) {
        const { runs } = await agent.listSuspendedRuns();
        const suspended = runs.find((r) => r.runId === runId);
        const calls = (suspended?.toolCalls ?? []).filter(
          (c): c is typeof c & { toolCallId: string; toolName: string } =>
            typeof c.toolCallId === 'string' && typeof c.toolName === 'string' && schemas.has(c.toolName) && isOurs(c.suspendPayload),
        );
        if (calls.length === 0) return last;
        const fresh = calls.filter((c) => !resumed.has(c.toolCallId));
        if (fresh.length === 0) throw new Error(`Mastra run ${runId} is still suspended on calls resumed already: ${calls.map((c) => c.toolCallId).join(', ')}`);
        // The decisions, all at once; the tool itself asks again when it resumes.
        const eventIds = fresh.map((c) => (c.suspendPayload as SuspendPayload).countersign.event_id).filter((id): id is string => !!id);
        await cs.waitDecided(eventIds, { signal: opts.signal });
        for (const c of fresh) {
          resumed.add(c.toolCallId);
          const stream = await agent.resumeStream({ countersign: 'decided' }, { runId, toolCallId: c.toolCallId, abortSignal: opts.signal });
          // Read to the end before asking how it finished: a run still suspended on another call has no full output.
          for await (const _ of stream.fullStream);
          if ((await stream.finishReason) !== 'suspended') last = await stream.getFullOutput();
        }
      }
    },
  };
}

/** Whether a suspend payload is one g.tool suspended with. */
function isOurs(payload: unknown): payload is SuspendPayload {
  return typeof payload === 'object' && payload !== null && typeof (payload as SuspendPayload).countersign === 'object';
}

/** A tool's inputSchema as JSON Schema: zod's conversion of a zod 4 schema, or a JSON Schema object as it is. */
function inputJSONSchema(schema: unknown): Record<string, unknown> | undefined {
  if (typeof schema !== 'object' || schema === null) return undefined;
  if ('_zod' in schema) return schemaObject(toJSONSchema(schema as ZodType));
  if ('~standard' in schema) return undefined;
  return schemaObject(schema);
}
