/**
 * Countersign for the OpenAI Agents SDK (`@openai/agents`).
 *
 *   const g = gate(cs, { run: { id: runId } });
 *   const agent = new Agent({ ..., tools: [g.tool({ name, parameters, execute })] });
 *   let result = await run(agent, input);
 *   if (result.interruptions.length) result = await g.resume(agent, result.state);
 *
 * g.tool() is the SDK's tool() with two things added: a `needsApproval` that
 * asks Countersign's policy (a call it allows outright runs without
 * interrupting the run), and an execute that claims the approval right
 * before running, with the arguments Countersign approved (a human's edit
 * replaces the model's) and the call's receipt on the details it gets
 * (`receiptOf(details)`). Every review carries the tool's parameters as the
 * SDK's tool has them, JSON Schema, so Countersign refuses an edit the tool
 * could not take. g.resume() settles the run's interruptions from
 * Countersign's decisions — approve, or reject with the reviewer's reason as
 * the tool result — and resumes the run, on any worker that holds the
 * serialized RunState.
 */
import {
  run as runAgent,
  tool as sdkTool,
  RunContext,
  RunState,
  type Agent,
  type FunctionTool,
  type RunResult,
  type RunToolApprovalItem,
  type ToolExecuteArgument,
  type ToolInputParameters,
  type ToolOptions,
  type UnknownContext,
} from '@openai/agents';
import { blockedMessage, type Countersign } from './client.js';
import { guarded, schemaObject, type Call } from './toolcalls.js';
import type { Result, RunInfo } from './types.js';

export { receiptOf } from './toolcalls.js';

/** Options of gate. */
export interface GateOptions {
  /**
   * The run the calls belong to: give its id, so that every worker finds
   * the same approvals. A function receives a RunContext whose `context` is
   * your run context (in settle, as serialized with the RunState).
   */
  run: RunInfo | ((ctx: RunContext<any> | undefined) => RunInfo);
  /** What a call that may not run returns as its tool result (default: the reason). */
  onBlocked?: (result: Result) => string;
  /**
   * JSON Schemas of tools' parameters by tool name, for tools not made with
   * g.tool (see needsApproval). A human's edit must satisfy its tool's schema.
   */
  toolSchemas?: Record<string, Record<string, unknown>>;
}

/** What settle did with a run's interruptions. */
export interface Settled {
  approved: RunToolApprovalItem[];
  rejected: Array<{ item: RunToolApprovalItem; result: Result }>;
}

/** The details the SDK passes a tool's execute (its third argument). */
export type ToolCallDetails = Parameters<FunctionTool['invoke']>[2];

/**
 * The options of g.tool: the SDK's tool options, whose execute returns R,
 * without needsApproval (the gate's own).
 */
export type GateToolOptions<P extends ToolInputParameters, C, R> = ToolOptions<P, C> & {
  execute: (input: ToolExecuteArgument<P>, context?: RunContext<C>, details?: ToolCallDetails) => R | Promise<R>;
  needsApproval?: never;
};

/** The Countersign gate of one run (or of runs whose context names them). */
export interface Gate {
  /**
   * The SDK's tool() with Countersign's needsApproval and a claiming
   * execute. A call that may not run returns the reason (a string), hence
   * the tool's result type R | string.
   */
  tool<P extends ToolInputParameters = undefined, C = UnknownContext, R = unknown>(options: GateToolOptions<P, C, R>): FunctionTool<C, P, R | string>;
  /**
   * A needsApproval for a tool you build yourself: true unless the policy
   * allows the call outright. Give its JSON Schema (or GateOptions.toolSchemas)
   * so that a human's edit is checked against it.
   */
  needsApproval(name: string, schema?: Record<string, unknown>): (ctx: RunContext<any>, input: unknown, callId?: string) => Promise<boolean>;
  /**
   * Waits for Countersign's decision on every interruption of state and
   * approves or rejects each. Aborting `signal` cancels the approvals still
   * pending (an explicit cancel of the calls) and rejects with its reason.
   */
  settle(state: RunState<any, any>, options?: { signal?: AbortSignal }): Promise<Settled>;
  /**
   * Settles and resumes until the run finishes: state is the RunState or its
   * serialized string (RunState.toString()), so any worker can resume.
   * Aborting `signal` while it waits for decisions cancels the approvals
   * still pending; a worker that merely stops leaves them for another.
   */
  resume<A extends Agent<any, any>>(
    agent: A,
    state: RunState<any, A> | string,
    options?: { signal?: AbortSignal; maxTurns?: number },
  ): Promise<RunResult<any, A>>;
}

/** gate connects a Countersign client to the OpenAI Agents SDK. */
export function gate(cs: Countersign, options: GateOptions): Gate {
  const runOf = (ctx: RunContext<any> | undefined): RunInfo =>
    typeof options.run === 'function' ? options.run(ctx) : options.run;
  const onBlocked = options.onBlocked ?? blockedMessage;
  const schemas = new Map<string, Record<string, unknown>>(Object.entries(options.toolSchemas ?? {}));
  const callOf = (id: string | undefined, name: string, input: unknown): Call => {
    const call: Call = { id, name, arguments: objectOf(input) };
    const schema = schemas.get(name);
    if (schema) call.tool_schema = schema;
    return call;
  };

  const needsApproval = (name: string, schema?: Record<string, unknown>) => {
    if (schema) schemas.set(name, schema);
    return async (ctx: RunContext<any>, input: unknown, callId?: string) => {
      const [r] = await cs.review(runOf(ctx), [callOf(callId, name, input)]);
      // Only a call the policy allows outright skips the interruption; a gated
      // call, even one decided already, goes through settle.
      return !(r!.verdict === 'allowed' && !r!.event_id);
    };
  };

  const settle = async (state: RunState<any, any>, opts: { signal?: AbortSignal } = {}): Promise<Settled> => {
    const items = state.getInterruptions();
    const out: Settled = { approved: [], rejected: [] };
    if (items.length === 0) return out;
    const calls = items.map((item) => {
      const raw = item.rawItem as { callId?: string; name?: string; arguments?: string };
      return callOf(raw.callId, item.name ?? raw.name ?? '', raw.arguments ?? '{}');
    });
    // The run context, through the state's public serialized form, only
    // when the run is a function of it.
    const ctx = typeof options.run === 'function' ? new RunContext(state.toJSON().context.context) : undefined;
    const results = await cs.review(runOf(ctx), calls, { wait: true, signal: opts.signal });
    items.forEach((item, i) => {
      const r = results[i]!;
      if (r.verdict === 'allowed') {
        state.approve(item);
        out.approved.push(item);
      } else {
        state.reject(item, { message: onBlocked(r) });
        out.rejected.push({ item, result: r });
      }
    });
    return out;
  };

  return {
    tool<P extends ToolInputParameters, C, R>(opts: GateToolOptions<P, C, R>): FunctionTool<C, P, R | string> {
      const name = opts.name;
      if (!name) throw new TypeError('gate.tool needs the tool name');
      const execute = guarded<ToolExecuteArgument<P>, [RunContext<C>?, ToolCallDetails?], R, string>(cs, opts.execute, {
        name,
        run: (ctx) => runOf(ctx),
        schema: async () => schemas.get(name),
        callId: (_ctx, details) => details?.toolCall?.callId,
        signal: (_ctx, details) => details?.signal,
        perCall: 1,
        onBlocked,
      });
      const t = sdkTool<P, C, R | string>({ ...opts, needsApproval: needsApproval(name), execute } as ToolOptions<P, C>);
      // The parameters as the SDK sends them to the model: the schema a human's edit must satisfy.
      const schema = schemaObject(t.parameters);
      if (schema && !schemas.has(name)) schemas.set(name, schema);
      return t as FunctionTool<C, P, R | string>;
    },
    needsApproval,
    settle,
    async resume(agent, state, opts = {}) {
      let st = typeof state === 'string' ? await RunState.fromString(agent, state) : state;
      for (;;) {
        await settle(st, opts);
        const result = await runAgent(agent, st, { signal: opts.signal, maxTurns: opts.maxTurns });
        if (!result.interruptions?.length) return result;
        st = result.state;
      }
    },
  };
}

function objectOf(input: unknown): Record<string, unknown> {
  if (typeof input === 'string') {
    try {
      input = JSON.parse(input);
    } catch {
      return { input };
    }
  }
  return typeof input === 'object' && input !== null && !Array.isArray(input) ? (input as Record<string, unknown>) : { input };
}
