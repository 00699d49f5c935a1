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
 * replaces the model's). g.resume() settles the run's interruptions from
 * Countersign's decisions — approve, or reject with the reviewer's reason as
 * the tool result — and resumes the run, on any worker that holds the
 * serialized RunState.
 */
import { run as runAgent, tool as sdkTool, RunState, type Agent, type RunContext, type RunResult, type RunToolApprovalItem } from '@openai/agents';
import { blockedMessage, type Countersign } from './client.js';
import type { Result, RunInfo } from './types.js';

/** Options of gate. */
export interface GateOptions {
  /**
   * The run the calls belong to: give its id, so that every worker finds
   * the same approvals. A function receives the SDK's RunContext (its
   * `context` is your run context, serialized with the RunState).
   */
  run: RunInfo | ((ctx: RunContext<any> | undefined) => RunInfo);
  /** What a call that may not run returns as its tool result (default: the reason). */
  onBlocked?: (result: Result) => string;
}

/** What settle did with a run's interruptions. */
export interface Settled {
  approved: RunToolApprovalItem[];
  rejected: Array<{ item: RunToolApprovalItem; result: Result }>;
}

type ToolOptions = Parameters<typeof sdkTool>[0];

/** The Countersign gate of one run (or of runs whose context names them). */
export interface Gate {
  /** The SDK's tool() with Countersign's needsApproval and a claiming execute. */
  tool<T extends ToolOptions>(options: T): ReturnType<typeof sdkTool>;
  /** A needsApproval for a tool you build yourself: true unless the policy allows the call outright. */
  needsApproval(name: string): (ctx: RunContext<any>, input: unknown, callId?: string) => Promise<boolean>;
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

  const needsApproval = (name: string) => async (ctx: RunContext<any>, input: unknown, callId?: string) => {
    const [r] = await cs.review(runOf(ctx), [{ id: callId, name, arguments: objectOf(input) }]);
    // Only a call the policy allows outright skips the interruption; a gated
    // call, even one decided already, goes through settle.
    return !(r!.verdict === 'allowed' && !r!.event_id);
  };

  const settle = async (state: RunState<any, any>, opts: { signal?: AbortSignal } = {}): Promise<Settled> => {
    const items = state.getInterruptions();
    const out: Settled = { approved: [], rejected: [] };
    if (items.length === 0) return out;
    const calls = items.map((item) => {
      const raw = item.rawItem as { type?: string; callId?: string; name?: string; arguments?: string };
      return { type: 'function_call' as const, callId: raw.callId, name: item.name ?? raw.name ?? '', arguments: raw.arguments ?? '{}' };
    });
    const ctx = (state as unknown as { _context?: RunContext<any> })._context;
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
    tool(opts) {
      const name = opts.name;
      if (!name) throw new TypeError('gate.tool needs the tool name');
      const execute = opts.execute as (input: any, ctx?: RunContext<any>, details?: unknown) => unknown;
      const guarded = cs.guardFunction(execute, {
        name,
        run: (ctx?: RunContext<any>) => runOf(ctx),
        onBlocked,
      });
      return sdkTool({ ...opts, needsApproval: needsApproval(name), execute: guarded } as ToolOptions);
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
