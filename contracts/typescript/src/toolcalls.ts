import type { Countersign } from './client.js';
import { CountersignError, Codes } from './errors.js';
import type { ExecutionOutcome, Result, RunInfo } from './types.js';

/** A tool call as Countersign reviews it. */
export interface Call {
  /** The model's id of the call; with the run id it makes the approval's event_id stable. */
  id?: string;
  name: string;
  /** The arguments, a JSON object. */
  arguments?: Record<string, unknown>;
  /** JSON Schema of the arguments (optional); a human's edit must satisfy it. */
  tool_schema?: Record<string, unknown>;
}

/** A tool call of OpenAI's Chat Completions API, as the model returns it. */
export interface OpenAIToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A tool call of OpenAI's Responses API (and the OpenAI Agents SDK's function_call item). */
export interface OpenAIFunctionCallItem {
  type: 'function_call';
  call_id?: string;
  callId?: string;
  name: string;
  arguments: string;
}

/** A tool_use content block of Anthropic's Messages API. */
export interface AnthropicToolUse {
  type: 'tool_use';
  id: string;
  name: string;
  input: Record<string, unknown>;
}

/** Any tool call shape the client accepts. */
export type AnyToolCall = Call | OpenAIToolCall | OpenAIFunctionCallItem | AnthropicToolUse;

function bad(message: string, field?: string): CountersignError {
  return new CountersignError(0, Codes.invalidToolCall, message, field);
}

function parseArguments(raw: unknown, field: string): Record<string, unknown> {
  if (raw === undefined || raw === null || raw === '') return {};
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch (err) {
      throw new CountersignError(0, Codes.invalidArguments, `${field} is not valid JSON`, field, { cause: err });
    }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CountersignError(0, Codes.invalidArguments, `${field} must be a JSON object`, field);
  }
  return value as Record<string, unknown>;
}

/**
 * toCall converts a tool call as it comes from a model — OpenAI's
 * `{id, type: "function", function: {name, arguments: "<JSON>"}}`, OpenAI
 * Responses' `{type: "function_call", call_id, name, arguments}`,
 * Anthropic's `{type: "tool_use", id, name, input}` — or Countersign's own
 * `{id, name, arguments}` into the `{id, name, arguments}` Countersign
 * reviews. Arguments that are not a JSON object fail with code
 * "invalid_arguments"; anything else unrecognised with "invalid_tool_call".
 */
export function toCall(call: AnyToolCall | Record<string, unknown>): Call {
  if (typeof call !== 'object' || call === null) throw bad('a tool call must be an object');
  const c = call as Record<string, any>;
  if (c.type === 'function' && typeof c.function === 'object' && c.function !== null) {
    if (typeof c.function.name !== 'string' || c.function.name === '') throw bad('function.name is required', 'function.name');
    return { id: str(c.id), name: c.function.name, arguments: parseArguments(c.function.arguments, 'function.arguments') };
  }
  if (c.type === 'tool_use') {
    if (typeof c.name !== 'string' || c.name === '') throw bad('name is required', 'name');
    return { id: str(c.id), name: c.name, arguments: parseArguments(c.input, 'input') };
  }
  if (c.type === 'function_call') {
    if (typeof c.name !== 'string' || c.name === '') throw bad('name is required', 'name');
    return { id: str(c.call_id ?? c.callId), name: c.name, arguments: parseArguments(c.arguments, 'arguments') };
  }
  if (c.type !== undefined) throw bad(`unknown tool call type ${JSON.stringify(c.type)}`, 'type');
  if (typeof c.name !== 'string' || c.name === '') throw bad('name is required', 'name');
  const out: Call = { id: str(c.id), name: c.name, arguments: parseArguments(c.arguments, 'arguments') };
  if (c.tool_schema !== undefined) out.tool_schema = c.tool_schema;
  return out;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

// What the framework adapters share: a guarded call runs through
// Countersign.run, and the tool gets its receipt on the per-call object its
// framework hands it (see receiptOf).

/** The receipts of guarded calls, by the per-call object their tool got. */
const receipts = new WeakMap<object, string>();

/**
 * receiptOf returns the receipt of the call a guarded tool is running: the
 * one-use countersignature (a compact JWS) that a receipt-verifying tool
 * checks, sent in the Countersign-Receipt header. Pass it the per-call
 * object the tool function got: the AI SDK's execute options, the LangChain
 * tool's config, the OpenAI Agents SDK's details (execute's third
 * argument). Undefined when Countersign signed no receipt for the call (a
 * call the policy allows outright, without `receipt: true`).
 */
export function receiptOf(perCall: unknown): string | undefined {
  return typeof perCall === 'object' && perCall !== null ? receipts.get(perCall) : undefined;
}

/**
 * withReceipt returns the per-call object on which receiptOf finds receipt:
 * a copy of a plain object, or a class instance itself (ADK's tool Context),
 * whose methods a copy would lose.
 */
function withReceipt<T>(perCall: T, receipt: string | undefined): T {
  if (typeof perCall === 'object' && perCall !== null && !isPlainObject(perCall)) {
    if (receipt) receipts.set(perCall, receipt);
    return perCall;
  }
  const copy = (typeof perCall === 'object' && perCall !== null ? { ...perCall } : {}) as T & object;
  if (receipt) receipts.set(copy, receipt);
  return copy;
}

function isPlainObject(v: object): boolean {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** The tools each client guards with Countersign.guard, by name, and the toolSchema it reviews them with. */
const guardedTools = new WeakMap<object, Map<string, { toolSchema?: Record<string, unknown> }>>();

/** markGuarded records that cs guards the tool name with Countersign.guard, reviewing with toolSchema. */
export function markGuarded(cs: object, name: string, toolSchema?: Record<string, unknown>): void {
  let byName = guardedTools.get(cs);
  if (!byName) guardedTools.set(cs, (byName = new Map()));
  byName.set(name, toolSchema ? { toolSchema } : {});
}

/**
 * guardOf says how cs reviews the calls of the tool name that it guards
 * with Countersign.guard (the tool claims its approval itself); undefined
 * for a tool it does not guard.
 */
export function guardOf(cs: object, name: string): { toolSchema?: Record<string, unknown> } | undefined {
  return guardedTools.get(cs)?.get(name);
}

/** How an adapter finds what a guarded call needs in its tool function's arguments (after the input). */
export interface GuardSpec<A extends unknown[], B, R = unknown> {
  name: string;
  run: (...rest: A) => RunInfo;
  /** The tool's JSON Schema, sent with the review so that a human's edit is checked against it. */
  schema: () => Promise<Record<string, unknown> | undefined>;
  callId: (...rest: A) => string | undefined;
  signal: (...rest: A) => AbortSignal | undefined;
  /** Which of the rest arguments is the per-call object the receipt rides on. */
  perCall: number;
  onBlocked: (result: Result) => B;
  /** What the outcome report of a call that returned says (see RunOptions.summarize). */
  summarize?: (output: R) => Partial<ExecutionOutcome>;
}

/**
 * guarded wraps a tool function: review → wait → claim → run with the
 * approved arguments and, on the per-call object, the receipt; a call that
 * may not run returns onBlocked's value instead.
 */
export function guarded<I, A extends unknown[], R, B>(
  cs: Countersign,
  fn: (input: I, ...rest: A) => R | Promise<R>,
  spec: GuardSpec<A, B, R>,
): (input: I, ...rest: A) => Promise<R | B> {
  return async (input: I, ...rest: A) => {
    const call: Call = { id: spec.callId(...rest), name: spec.name, arguments: objectArguments(input) };
    const schema = await spec.schema();
    if (schema) call.tool_schema = schema;
    const out = await cs.run(
      spec.run(...rest),
      call,
      // run hands fn the call's receipt with its context.
      (args: Record<string, unknown>, context?: { receipt?: string }) => {
        const passed = [...rest] as unknown[];
        passed[spec.perCall] = withReceipt(rest[spec.perCall], context?.receipt);
        return fn(args as I, ...(passed as A));
      },
      { signal: spec.signal(...rest), summarize: spec.summarize as ((output: unknown) => Partial<ExecutionOutcome>) | undefined },
    );
    return out.ran ? (out.output as R) : spec.onBlocked(out.result);
  };
}

/** A tool's input as review arguments: an object as it is, anything else under "input". */
export function objectArguments(input: unknown): Record<string, unknown> {
  if (input === undefined || input === null) return {};
  return typeof input === 'object' && !Array.isArray(input) ? (input as Record<string, unknown>) : { input };
}

/** A JSON Schema object, or undefined for anything else. */
export function schemaObject(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}
