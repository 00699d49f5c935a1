/**
 * Countersign for the Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`).
 *
 *   const g = gate(cs, { run: { id: runId } });
 *   const pay = g.tool('payments_send', 'Send a payment', { amount: z.number() }, sendPayment);
 *   const billing = createSdkMcpServer({ name: 'billing', tools: [pay] });
 *   for await (const m of query({ prompt, options: { mcpServers: { billing }, canUseTool: g.canUseTool, hooks: g.hooks } })) …
 *
 * g.canUseTool is the SDK's permission callback: it reviews each call the
 * model makes with Countersign (the tool's name without its `mcp__<server>__`
 * prefix, the model's tool_use id as the call id, the tool's JSON Schema) and
 * waits for the decision. A call the policy allows or a human approved is
 * allowed; any other is denied, and the reason is the tool result the model
 * sees. A tool made with g.tool claims its approval in its handler, right
 * before it runs, with the approved arguments (a human's edit), and reports
 * how it ended. For any other tool — the SDK's own (Bash, Write, …) or an MCP
 * server's — canUseTool claims the approval as it allows the call, hands the
 * approved arguments on as `updatedInput`, and g.hooks (PostToolUse,
 * PostToolUseFailure) report the outcome.
 *
 * The SDK waits inside canUseTool: a run cannot be suspended and resumed in
 * another process. A process that ends while it waits leaves the approval
 * pending, and a run that proposes the same call again (same run id and
 * tool_use id) re-attaches to it.
 */
import { tool as sdkTool, type CanUseTool, type HookCallbackMatcher, type HookEvent, type HookInput, type PermissionResult, type SdkMcpToolDefinition } from '@anthropic-ai/claude-agent-sdk';
import { toJSONSchema, object, type ZodRawShape } from 'zod';
import { blockedMessage, type Countersign } from './client.js';
import { guarded, objectArguments, schemaObject, type Call } from './toolcalls.js';
import type { ExecutionOutcome, Result, RunInfo } from './types.js';

export { receiptOf } from './toolcalls.js';

/** Options of gate. */
export interface GateOptions {
  /** The run the calls belong to: give its id, so that every worker finds the same approvals. */
  run: RunInfo;
  /** The message a denied call gives the model (default: the reason). */
  onBlocked?: (result: Result) => string;
  /**
   * JSON Schemas of tools' inputs by tool name (without the mcp__ prefix),
   * for tools not made with g.tool, such as the SDK's own. A human's edit
   * must satisfy its tool's schema.
   */
  toolSchemas?: Record<string, Record<string, unknown>>;
}

/** What an SDK MCP tool's handler returns. */
type CallToolResult = Awaited<ReturnType<SdkMcpToolDefinition<any>['handler']>>;

/** The Countersign gate of one run. */
export interface Gate {
  /**
   * The SDK's tool() whose handler claims the call's approval right before
   * it runs, runs with the approved arguments (the receipt on `extra`:
   * receiptOf(extra)), and reports the outcome: failed when the handler
   * throws or returns isError. A call that may not run returns the reason
   * as an error result.
   */
  tool<S extends ZodRawShape>(
    name: string,
    description: string,
    shape: S,
    handler: Parameters<typeof sdkTool<S>>[3],
    extras?: Parameters<typeof sdkTool<S>>[4],
  ): SdkMcpToolDefinition<S>;
  /** The permission callback (Options.canUseTool): waits for Countersign's decision on each call. */
  canUseTool: CanUseTool;
  /**
   * Hooks (Options.hooks) that report the outcome of the calls canUseTool
   * claimed: the SDK's own tools, and tools not made with g.tool.
   */
  hooks: Partial<Record<HookEvent, HookCallbackMatcher[]>>;
}

/** A tool's name as the policy sees it: an MCP tool's without its mcp__<server>__ prefix. */
export function toolName(name: string): string {
  if (!name.startsWith('mcp__')) return name;
  const rest = name.slice('mcp__'.length);
  const i = rest.indexOf('__');
  return i > 0 ? rest.slice(i + 2) : name;
}

/** gate connects a Countersign client to the Claude Agent SDK. */
export function gate(cs: Countersign, options: GateOptions): Gate {
  const onBlocked = options.onBlocked ?? blockedMessage;
  const schemas = new Map<string, Record<string, unknown>>(Object.entries(options.toolSchemas ?? {}));
  const ownTools = new Set<string>();
  // The approvals canUseTool claimed, by tool_use id, until a hook reports them.
  const claimed = new Map<string, string>();
  const callOf = (id: string | undefined, name: string, input: unknown): Call => {
    const call: Call = { id, name, arguments: objectArguments(input) };
    const schema = schemas.get(name);
    if (schema) call.tool_schema = schema;
    return call;
  };

  const canUseTool: CanUseTool = async (fullName, input, opts): Promise<PermissionResult> => {
    const name = toolName(fullName);
    const call = callOf(opts.toolUseID, name, input);
    const [r] = await cs.review(options.run, [call], { wait: true, signal: opts.signal });
    if (r!.verdict !== 'allowed') return { behavior: 'deny', message: onBlocked(r!), toolUseID: opts.toolUseID };
    // A g.tool handler re-attaches with the model's arguments, claims and runs.
    if (!r!.event_id || ownTools.has(name)) return { behavior: 'allow', updatedInput: input, toolUseID: opts.toolUseID };
    // Nothing in the tool claims: claim now, right before the SDK runs it.
    const out = await cs.run(options.run, call, (args) => args, { signal: opts.signal, report: false });
    if (!out.ran) return { behavior: 'deny', message: onBlocked(out.result), toolUseID: opts.toolUseID };
    if (opts.toolUseID) claimed.set(opts.toolUseID, r!.event_id);
    return { behavior: 'allow', updatedInput: out.output!, toolUseID: opts.toolUseID };
  };

  const reportHook = async (input: HookInput) => {
    if (input.hook_event_name !== 'PostToolUse' && input.hook_event_name !== 'PostToolUseFailure') return {};
    const eventId = claimed.get(input.tool_use_id);
    if (!eventId) return {};
    claimed.delete(input.tool_use_id);
    const outcome: ExecutionOutcome =
      input.hook_event_name === 'PostToolUse' ? { status: 'succeeded' } : { status: 'failed', summary: input.error };
    // A report that fails does not change the call's result (run's rule).
    await cs.report(eventId, outcome).catch(() => {});
    return {};
  };

  return {
    tool(name, description, shape, handler, extras) {
      ownTools.add(name);
      const schema = schemaObject(toJSONSchema(object(shape)));
      if (schema && !schemas.has(name)) schemas.set(name, schema);
      type Extra = { signal?: AbortSignal; _meta?: Record<string, unknown> } | undefined;
      const run = guarded<any, [unknown], CallToolResult, CallToolResult>(cs, handler as (args: any, extra: unknown) => Promise<CallToolResult>, {
        name,
        run: () => options.run,
        schema: async () => schemas.get(name),
        callId: (extra) => {
          const id = (extra as Extra)?._meta?.['claudecode/toolUseId'];
          return typeof id === 'string' ? id : undefined;
        },
        signal: (extra) => (extra as Extra)?.signal,
        perCall: 0,
        onBlocked: (r) => ({ content: [{ type: 'text', text: onBlocked(r) }], isError: true }),
        summarize: (out) => (out?.isError ? { status: 'failed', summary: textOf(out) } : {}),
      });
      return sdkTool(name, description, shape, run as typeof handler, extras);
    },
    canUseTool,
    hooks: {
      PostToolUse: [{ hooks: [reportHook] }],
      PostToolUseFailure: [{ hooks: [reportHook] }],
    },
  };
}

/** The text of an MCP tool result, for a failed call's summary. */
function textOf(out: CallToolResult): string {
  return (out.content ?? [])
    .map((c) => (c.type === 'text' ? c.text : ''))
    .filter(Boolean)
    .join('\n');
}
