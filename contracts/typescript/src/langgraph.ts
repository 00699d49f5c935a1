/**
 * Countersign for LangGraph JS (`@langchain/langgraph`).
 *
 *   const g = gate(cs);   // the run id is the thread_id
 *   graph.addNode('approve', g.node({ tools: 'tools', agent: 'agent' }), { ends: ['tools', 'agent'] })
 *   const tools = new ToolNode([tool(g.guard('payments_send', send), {...})]);
 *   await app.invoke(input, config);                      // suspends at the interrupt
 *   await app.invoke(await g.resume(app, config), config); // any worker, once decided
 *
 * The node reviews the last AI message's tool calls. While any is pending it
 * interrupts the graph (interrupt(), checkpointed) with the approvals it
 * waits on. g.resume() waits for Countersign's decisions and maps each —
 * approve, edit, reject, respond, or an expiry or cancellation — onto
 * `new Command({ resume })`. On resume the node checks Countersign again
 * (the resume value is a hint, never the authority) and routes: edited
 * arguments are what the guarded tools run with, a call that may not run
 * gets the reason as its tool result (a ToolMessage, without running the
 * tools node when no call may run), and the guarded tools claim each
 * approval right before running.
 */
import { Command, interrupt } from '@langchain/langgraph';
import { AIMessage, ToolMessage, type BaseMessage } from '@langchain/core/messages';
import type { RunnableConfig } from '@langchain/core/runnables';
import { blockedMessage, type Countersign } from './client.js';
import type { ApprovalRecord } from './schema.gen.js';
import type { Result, RunInfo } from './types.js';

/** Options of gate. */
export interface GateOptions {
  /** The run (its id defaults to the thread_id of the graph's config). */
  run?: RunInfo | ((config: RunnableConfig | undefined) => RunInfo);
  /** What a call that may not run gets as its tool result (default: the reason). */
  onBlocked?: (result: Result) => string;
}

/** One decision, as g.resume() puts it in Command({ resume }). */
export interface ResumeDecision {
  event_id: string;
  tool_call_id: string;
  decision: 'approve' | 'edit' | 'reject' | 'respond' | 'expired' | 'cancelled';
  /** The arguments to run with (approve, edit). */
  arguments?: Record<string, unknown>;
  /** The reviewer's comment or feedback. */
  message?: string;
}

/** What the node's interrupt carries: the approvals it waits on. */
export interface CountersignInterrupt {
  countersign: Array<{ event_id: string; tool_call_id: string; name: string }>;
}

export interface NodeOptions {
  /** The node that runs the tools. */
  tools: string;
  /** The node to return to when no call may run (the model's). */
  agent: string;
}

type MessagesState = { messages: BaseMessage[] };

/** The Countersign gate of a graph. */
export interface Gate {
  /** The approval node: place it between the model's node and the tools node. */
  node(options: NodeOptions): (state: MessagesState, config?: RunnableConfig) => Promise<Command>;
  /** Wraps a tool function: review → wait → claim → run with the approved arguments. */
  guard<F extends (input: any, config?: any) => any>(name: string, fn: F): F;
  /**
   * Waits for the decisions the graph's interrupts wait on; returns the
   * Command to resume with. Aborting `signal` cancels the approvals still
   * pending and rejects with its reason.
   */
  resume(
    graph: { getState(config: RunnableConfig): Promise<{ tasks: ReadonlyArray<{ interrupts?: ReadonlyArray<{ value?: unknown }> }> }> },
    config: RunnableConfig,
    options?: { signal?: AbortSignal },
  ): Promise<Command<unknown, Record<string, any>, any>>;
}

/** gate connects a Countersign client to LangGraph. */
export function gate(cs: Countersign, options: GateOptions = {}): Gate {
  const onBlocked = options.onBlocked ?? blockedMessage;
  const runOf = (config: RunnableConfig | undefined): RunInfo => {
    const base = typeof options.run === 'function' ? options.run(config) : options.run ?? {};
    const thread = config?.configurable?.thread_id;
    return base.id || thread === undefined ? base : { ...base, id: String(thread) };
  };

  return {
    node({ tools, agent }) {
      return async (state, config) => {
        const last = state.messages.at(-1);
        const toolCalls = last && AIMessage.isInstance(last) ? last.tool_calls ?? [] : [];
        if (toolCalls.length === 0) return new Command({ goto: agent });
        const calls = toolCalls.map((tc) => ({ id: tc.id, name: tc.name, arguments: tc.args as Record<string, unknown> }));
        const run = runOf(config);
        let results = await cs.review(run, calls);
        const pending = results.filter((r) => r.verdict === 'pending');
        if (pending.length > 0) {
          const value: CountersignInterrupt = {
            countersign: pending.map((r) => ({
              event_id: r.event_id!,
              tool_call_id: r.tool_call_id,
              name: calls.find((c) => c.id === r.tool_call_id)?.name ?? '',
            })),
          };
          interrupt(value);
          // Resumed: Countersign, not the resume value, decides. Aborting
          // the graph's run (config.signal) cancels what is still pending.
          results = await cs.review(run, calls, { wait: true, signal: config?.signal });
        }
        const blocked = results.filter((r) => r.verdict !== 'allowed');
        if (blocked.length === results.length) {
          return new Command({
            goto: agent,
            update: {
              messages: results.map((r) => new ToolMessage({ content: onBlocked(r), tool_call_id: r.tool_call_id, status: 'error' })),
            },
          });
        }
        // The tool calls stay as the model made them: the guarded tools
        // re-attach to their approvals with these arguments and run with the
        // approved ones (a human's edit), or return the reason.
        return new Command({ goto: tools });
      };
    },

    guard(name, fn) {
      return cs.guardFunction(fn, { name, run: (config?: RunnableConfig) => runOf(config), onBlocked }) as unknown as typeof fn;
    },

    async resume(graph, config, opts = {}) {
      const st = await graph.getState(config);
      const waits = st.tasks.flatMap((t) => t.interrupts ?? []).flatMap((i) => (i.value as CountersignInterrupt | undefined)?.countersign ?? []);
      // Aborting opts.signal cancels the approvals still pending (an explicit
      // cancel of the calls); a resume that merely stops leaves them pending.
      const states = await cs.waitDecided(waits.map((w) => w.event_id), { signal: opts.signal });
      const decisions: ResumeDecision[] = waits.map((w, i) => decisionOf(w, states[i]!.record));
      return new Command({ resume: { decisions } });
    },
  };
}

/** decisionOf maps a terminal record onto a resume decision. */
export function decisionOf(w: { event_id: string; tool_call_id: string }, rec: ApprovalRecord): ResumeDecision {
  const o = rec.outcome;
  const base = { event_id: w.event_id, tool_call_id: w.tool_call_id };
  switch (rec.status) {
    case 'approved':
      return { ...base, decision: o?.decision === 'edit' ? 'edit' : 'approve', ...(o?.arguments ? { arguments: o.arguments } : {}), ...(o?.comment ? { message: o.comment } : {}) };
    case 'rejected':
      return { ...base, decision: 'reject', ...(o?.comment ? { message: o.comment } : {}) };
    case 'responded':
      return { ...base, decision: 'respond', ...(o?.comment ? { message: o.comment } : {}) };
    case 'expired':
      return { ...base, decision: 'expired' };
    default:
      return { ...base, decision: 'cancelled' };
  }
}
