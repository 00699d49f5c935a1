/**
 * Countersign for LangGraph JS (`@langchain/langgraph`).
 *
 *   const g = gate(cs);   // the run id is the thread_id
 *   const pay = tool(g.guard('payments_send', send), { name: 'payments_send', schema, ... });
 *   graph.addNode('approve', g.node({ tools: 'tools', agent: 'agent', schemas: [pay] }), { ends: ['tools', 'agent'] })
 *   graph.addNode('tools', new ToolNode([pay]));
 *   await app.invoke(input, config);                      // suspends at the interrupt
 *   await app.invoke(await g.resume(app, config), config); // any worker, once decided
 *
 * The node reviews the last AI message's tool calls, each with its tool's
 * schema as JSON Schema (LangChain's own conversion of the tool's zod or
 * JSON schema), so Countersign refuses an edit the tool could not take.
 * While any call is pending it interrupts the graph (interrupt(),
 * checkpointed) with the approvals it waits on. g.resume() waits for
 * Countersign's decisions and maps each — approve, edit, reject, respond, or
 * an expiry or cancellation — onto `new Command({ resume })`. On resume the
 * node checks Countersign again (the resume value is a hint, never the
 * authority) and routes: a call that may not run gets the reason as its tool
 * result (a ToolMessage) and never reaches the tools node; each call that
 * may run is sent to the tools node alone (`Send` with `lg_tool_call`, as
 * ToolNode takes it). A guarded tool (g.guard, or the client's own
 * Countersign.guard) re-attaches to its approval, claims it
 * right before running and runs with the approved arguments (a human's
 * edit), its receipt on the config it gets (`receiptOf(config)`). A tool
 * left unguarded is claimed by the node and sent with the approved
 * arguments; one the policy allows outright is sent as the model made it.
 */
import { Command, Send, interrupt } from '@langchain/langgraph';
import { AIMessage, ToolMessage, type BaseMessage } from '@langchain/core/messages';
import type { ToolCall } from '@langchain/core/messages/tool';
import type { RunnableConfig } from '@langchain/core/runnables';
import { toJsonSchema } from '@langchain/core/utils/json_schema';
import { blockedMessage, type Countersign } from './client.js';
import type { ApprovalRecord } from './schema.gen.js';
import { guardOf, guarded, schemaObject, type Call } from './toolcalls.js';
import type { Result, RunInfo } from './types.js';

export { receiptOf } from './toolcalls.js';

/** Options of gate. */
export interface GateOptions {
  /** The run (its id defaults to the thread_id of the graph's config). */
  run?: RunInfo | ((config: RunnableConfig | undefined) => RunInfo);
  /** What a call that may not run gets as its tool result (default: the reason). */
  onBlocked?: (result: Result) => string;
  /**
   * JSON Schemas of tools' arguments by tool name, for tools not given to
   * node's `schemas`. A human's edit must satisfy its tool's schema.
   */
  toolSchemas?: Record<string, Record<string, unknown>>;
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

/** A tool whose schema the gate reads: a LangChain tool, or anything with a name and a zod or JSON schema. */
export interface SchemaSource {
  name: string;
  schema?: unknown;
}

export interface NodeOptions {
  /** The node that runs the tools: a ToolNode, or a node that takes ToolNode's Send input. */
  tools: string;
  /** The node to return to when no call may run (the model's). */
  agent: string;
  /** The tools of the tools node: every call is reviewed with its tool's schema. */
  schemas?: readonly SchemaSource[];
}

type MessagesState = { messages: BaseMessage[] };

/** The Countersign gate of a graph. */
export interface Gate {
  /** The approval node: place it between the model's node and the tools node. */
  node(options: NodeOptions): (state: MessagesState, config?: RunnableConfig) => Promise<Command>;
  /**
   * Wraps a tool function: review → wait → claim → run with the approved
   * arguments, the call's receipt on the config it gets (receiptOf). A call
   * that may not run returns the reason (a string) instead, hence the
   * wrapper's return type. `schema` (zod or JSON Schema) is needed only
   * when the node is not given the tool.
   */
  guard<I, A extends unknown[], R>(
    name: string,
    fn: (input: I, ...rest: A) => R | Promise<R>,
    options?: { schema?: unknown },
  ): (input: I, ...rest: A) => Promise<R | string>;
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
  // The tools' JSON Schemas by name, and the tools whose function is guarded.
  const schemas = new Map<string, Record<string, unknown>>(Object.entries(options.toolSchemas ?? {}));
  const guardedTools = new Set<string>();
  const learn = (name: string, schema: unknown) => {
    if (schema === undefined || schemas.has(name)) return;
    const json = schemaObject(toJsonSchema(schema as Parameters<typeof toJsonSchema>[0]));
    if (json) schemas.set(name, json);
  };
  // A tool guarded with Countersign.guard (cs.guard, cs.guardFunction)
  // claims its approval itself, after a review of its own: the node reviews
  // its calls as the guard does (with the guard's toolSchema, or none), so
  // that both are the one request.
  const csGuard = (name: string) => (guardedTools.has(name) ? undefined : guardOf(cs, name));
  const claimsItself = (name: string) => guardedTools.has(name) || csGuard(name) !== undefined;
  const callOf = (tc: ToolCall): Call => {
    const call: Call = { id: tc.id, name: tc.name, arguments: tc.args as Record<string, unknown> };
    const guard = csGuard(tc.name);
    const schema = guard ? guard.toolSchema : schemas.get(tc.name);
    if (schema) call.tool_schema = schema;
    return call;
  };

  return {
    node({ tools, agent, schemas: sources = [] }) {
      for (const s of sources) learn(s.name, s.schema);
      return async (state, config) => {
        const last = state.messages.at(-1);
        const toolCalls = last && AIMessage.isInstance(last) ? last.tool_calls ?? [] : [];
        if (toolCalls.length === 0) return new Command({ goto: agent });
        const calls = toolCalls.map(callOf);
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
        const blocked: ToolMessage[] = [];
        const sends: Send[] = [];
        const block = (r: Result, tc: ToolCall) =>
          blocked.push(new ToolMessage({ content: onBlocked(r), tool_call_id: tc.id ?? r.tool_call_id, name: tc.name, status: 'error' }));
        for (const [i, tc] of toolCalls.entries()) {
          const r = results[i]!;
          if (r.verdict !== 'allowed') {
            block(r, tc);
          } else if (claimsItself(tc.name)) {
            // The guarded tool re-attaches to its approval with the
            // model's arguments, claims it and runs with the approved ones.
            sends.push(new Send(tools, { ...state, lg_tool_call: tc }));
          } else if (r.event_id) {
            // Nothing in the tool claims: the node does, once, and sends
            // the approved arguments. The tool runs in the tools node, out
            // of the node's sight: its outcome is not reported.
            const out = await cs.run(run, calls[i]!, (args) => args, { signal: config?.signal, report: false });
            if (out.ran) sends.push(new Send(tools, { ...state, lg_tool_call: { ...tc, args: out.output! } }));
            else block(out.result, tc);
          } else {
            sends.push(new Send(tools, { ...state, lg_tool_call: { ...tc, args: r.arguments ?? tc.args } }));
          }
        }
        const update = blocked.length > 0 ? { messages: blocked } : undefined;
        return sends.length > 0 ? new Command({ goto: sends, update }) : new Command({ goto: agent, update });
      };
    },

    guard(name, fn, guardOptions = {}) {
      learn(name, guardOptions.schema);
      guardedTools.add(name);
      const configOf = (rest: unknown[]) => rest[0] as (RunnableConfig & { toolCall?: { id?: string } }) | undefined;
      return guarded(cs, fn, {
        name,
        run: (...rest) => runOf(configOf(rest)),
        schema: async () => schemas.get(name),
        callId: (...rest) => configOf(rest)?.toolCall?.id,
        signal: (...rest) => configOf(rest)?.signal,
        perCall: 0,
        onBlocked,
      });
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
