import { CountersignError, Codes } from './errors.js';

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
