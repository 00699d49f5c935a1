/**
 * Countersign for the Vercel AI SDK (`ai`, v7).
 *
 * Blocking, for server-side agents: wrap the tools; each gated call waits
 * for its decision inside execute, then claims and runs (or returns the
 * reason as the tool result):
 *
 *   const g = gate(cs, { run: { id: runId } });
 *   await generateText({ model, tools: g.tools({ send: tool({...}) }), prompt });
 *
 * Suspending, for chats and durable runs: add `toolApproval: g.toolApproval`.
 * A gated call comes back as a tool-approval-request and the request ends;
 * the app stores the conversation (`[...messages, ...result.response.messages]`).
 * Later, on any worker, `await g.approvalResponses(messages)` waits for
 * Countersign's decisions and returns the tool message to append before
 * calling the model again. Keep the wrapped tools too: they claim each
 * approval right before running and run with a human's edited arguments.
 *
 * Every review carries the tool's input schema as JSON Schema (the AI SDK's
 * own conversion of the tool's inputSchema), so Countersign refuses an edit
 * the tool could not take. A tool reads its call's receipt with
 * `receiptOf(options)`.
 */
import { asSchema, type InferToolInput, type InferToolOutput, type ModelMessage, type Tool, type ToolApprovalResponse, type ToolApprovalStatus, type ToolExecutionOptions, type ToolSet } from 'ai';
import { blockedMessage, type Countersign } from './client.js';
import { CountersignError, Codes } from './errors.js';
import { guarded, objectArguments, schemaObject, type Call } from './toolcalls.js';
import type { Result, RunInfo } from './types.js';

export { receiptOf } from './toolcalls.js';

/** Options of gate. */
export interface GateOptions<B = string> {
  /** The run the calls belong to: give its id, so every worker finds the same approvals. */
  run: RunInfo;
  /** What a call that may not run returns as its tool result (default: the reason). */
  onBlocked?: (result: Result) => B;
  /**
   * JSON Schemas of tools' inputs by tool name, for tools whose schema the
   * gate cannot take from a wrapped tool (a tool only toolApproval sees).
   * A human's edit must satisfy its tool's schema.
   */
  toolSchemas?: Record<string, Record<string, unknown>>;
}

/** What a wrapped tool's execute may return: the tool's output, or what onBlocked returns. */
type ContextOf<T> = T extends Tool<any, any, infer C> ? C : never;

/** A tool set whose executing tools return their output or the blocked value B. */
export type GuardedTools<T extends ToolSet, B> = {
  [K in keyof T]: T[K] extends { execute: (...args: any[]) => unknown }
    ? Tool<InferToolInput<T[K]>, InferToolOutput<T[K]> | B, ContextOf<T[K]>>
    : T[K];
};

/** The Countersign gate of one run. */
export interface Gate<B = string> {
  /**
   * Wraps every tool's execute: review → wait → claim → run with the
   * approved arguments, and the call's receipt on the options it gets
   * (receiptOf). When the SDK aborts the call (generateText's
   * `abortSignal`, passed to execute) while it waits, its approval is
   * cancelled. A call that may not run returns onBlocked's value (the
   * reason), so each tool's output type gains B.
   */
  tools<T extends ToolSet>(tools: T): GuardedTools<T, B>;
  /**
   * The AI SDK's toolApproval hook: calls the policy allows run; calls it
   * denies, or humans rejected, are denied with the reason; others wait for
   * a human (user-approval).
   */
  toolApproval: (options: { toolCall: { toolCallId: string; toolName: string; input: unknown } }) => Promise<ToolApprovalStatus>;
  /**
   * Waits for Countersign's decision on every tool-approval-request not
   * answered yet in `parts` — the conversation as stored
   * (`[...messages, ...result.response.messages]`), or result.content — and
   * returns the tool message of approval responses to append to the
   * conversation (undefined when none is open). Aborting `signal` cancels
   * the approvals still pending and rejects with its reason.
   */
  approvalResponses(parts: readonly unknown[], options?: { signal?: AbortSignal }): Promise<ModelMessage | undefined>;
}

/** An open approval request with the tool call it is about. */
interface Request {
  approvalId: string;
  call: { toolCallId: string; toolName: string; input: unknown };
}

/** gate connects a Countersign client to the AI SDK. */
export function gate(cs: Countersign, options: GateOptions<string>): Gate<string>;
export function gate<B>(cs: Countersign, options: GateOptions<B> & { onBlocked: (result: Result) => B }): Gate<B>;
export function gate<B>(cs: Countersign, options: GateOptions<B>): Gate<B> {
  // Without onBlocked, B is string (the first overload).
  const onBlocked = options.onBlocked ?? (blockedMessage as (r: Result) => unknown as (r: Result) => B);
  const schemas = new Map<string, () => Promise<Record<string, unknown> | undefined>>();
  for (const [name, s] of Object.entries(options.toolSchemas ?? {})) schemas.set(name, async () => s);
  const schemaOf = (name: string) => schemas.get(name)?.() ?? Promise.resolve(undefined);
  const callOf = async (id: string, name: string, input: unknown): Promise<Call> => {
    const call: Call = { id, name, arguments: objectArguments(input) };
    const schema = await schemaOf(name);
    if (schema) call.tool_schema = schema;
    return call;
  };

  return {
    tools(tools) {
      const out: Record<string, unknown> = {};
      for (const [name, t] of Object.entries(tools)) {
        if (!schemas.has(name) && t.inputSchema !== undefined) {
          let derived: Promise<Record<string, unknown> | undefined> | undefined;
          // Converted once, when first needed.
          schemas.set(name, () => (derived ??= Promise.resolve(asSchema(t.inputSchema).jsonSchema).then(schemaObject)));
        }
        const execute = t.execute as ((input: unknown, opts: ToolExecutionOptions<unknown>) => unknown) | undefined;
        out[name] = execute
          ? {
              ...t,
              execute: guarded(cs, execute, {
                name,
                run: () => options.run,
                schema: () => schemaOf(name),
                callId: (opts) => opts?.toolCallId,
                signal: (opts) => opts?.abortSignal,
                perCall: 0,
                onBlocked,
              }),
            }
          : t;
      }
      return out as GuardedTools<typeof tools, B>;
    },

    async toolApproval({ toolCall }) {
      const [r] = await cs.review(options.run, [await callOf(toolCall.toolCallId, toolCall.toolName, toolCall.input)]);
      switch (r!.verdict) {
        case 'allowed':
          return r!.event_id ? { type: 'approved', reason: 'Approved in Countersign.' } : 'not-applicable';
        case 'pending':
          return { type: 'user-approval', reason: `Waiting for approval in Countersign (event ${r!.event_id}).` };
        default:
          return { type: 'denied', reason: String(onBlocked(r!)) };
      }
    },

    async approvalResponses(parts, opts = {}) {
      const requests = openRequests(parts);
      if (requests.length === 0) return undefined;
      const calls = await Promise.all(requests.map((p) => callOf(p.call.toolCallId, p.call.toolName, p.call.input)));
      const results = await cs.review(options.run, calls, { wait: true, signal: opts.signal });
      const content: ToolApprovalResponse[] = requests.map((p, i) => {
        const r = results[i]!;
        return r.verdict === 'allowed'
          ? { type: 'tool-approval-response', approvalId: p.approvalId, approved: true, reason: 'Approved in Countersign.' }
          : { type: 'tool-approval-response', approvalId: p.approvalId, approved: false, reason: String(onBlocked(r)) };
      });
      return { role: 'tool', content };
    },
  };
}

/**
 * The tool-approval-requests among parts (messages and their content, or
 * result.content) that no tool-approval-response answers, each with its
 * tool call. In messages a request names its call by toolCallId, and the
 * call is a tool-call part of an assistant message; in result.content it
 * carries the call.
 */
function openRequests(parts: readonly unknown[]): Request[] {
  const requests: Array<{ approvalId: string; toolCallId: string; isAutomatic?: boolean; call?: Request['call'] }> = [];
  const calls = new Map<string, Request['call']>();
  const answered = new Set<string>();
  const walk = (items: readonly unknown[]) => {
    for (const p of items) {
      if (typeof p !== 'object' || p === null) continue;
      const o = p as Record<string, any>;
      switch (o.type) {
        case 'tool-call':
          if (typeof o.toolCallId === 'string') calls.set(o.toolCallId, { toolCallId: o.toolCallId, toolName: o.toolName, input: o.input });
          break;
        case 'tool-approval-request': {
          const call = typeof o.toolCall === 'object' && o.toolCall !== null ? (o.toolCall as Request['call']) : undefined;
          const toolCallId = typeof o.toolCallId === 'string' ? o.toolCallId : call?.toolCallId;
          if (typeof o.approvalId === 'string' && typeof toolCallId === 'string') {
            requests.push({ approvalId: o.approvalId, toolCallId, isAutomatic: o.isAutomatic, call });
          }
          break;
        }
        case 'tool-approval-response':
          if (typeof o.approvalId === 'string') answered.add(o.approvalId);
          break;
        default:
          if (Array.isArray(o.content)) walk(o.content);
      }
    }
  };
  walk(parts);
  const seen = new Set<string>();
  const out: Request[] = [];
  for (const r of requests) {
    if (r.isAutomatic || answered.has(r.approvalId) || seen.has(r.approvalId)) continue;
    seen.add(r.approvalId);
    const call = r.call ?? calls.get(r.toolCallId);
    if (!call || typeof call.toolName !== 'string') {
      throw new CountersignError(0, Codes.invalidToolCall, `tool-approval-request ${r.approvalId} names tool call ${r.toolCallId}, which is not among the messages`, 'toolCallId');
    }
    out.push({ approvalId: r.approvalId, call });
  }
  return out;
}
