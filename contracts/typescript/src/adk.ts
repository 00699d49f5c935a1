/**
 * Countersign for Google's Agent Development Kit for TypeScript (`@google/adk`).
 *
 *   const g = gate(cs, { run: { requested_by: user } }); // run id: the session id
 *   const pay = g.tool({ name: 'payments_send', description: 'Send a payment', parameters, execute: sendPayment });
 *   const runner = new Runner({ appName, agent: new LlmAgent({ name, model, tools: [pay] }), sessionService });
 *   for await (const e of runner.runAsync({ userId, sessionId, newMessage })) …   // pauses while a human decides
 *   for await (const e of g.resume(runner, { userId, sessionId })) …              // on any worker
 *
 * g.tool is ADK's FunctionTool with a `requireConfirmation` that asks
 * Countersign's policy: a call it allows (or denies) outright goes straight
 * to the tool; a call that waits for a human pauses the run with ADK's own
 * `adk_request_confirmation`, and the session (with a DatabaseSessionService,
 * in a database every worker reaches) holds the paused run. g.resume waits
 * for Countersign's decision on every confirmation the session leaves open,
 * answers each (`confirmed` is whether Countersign allowed the call, the
 * decision in `payload.countersign`) and runs the agent again, until no
 * confirmation is open.
 *
 * The tool's execute claims its approval right before it runs, with the
 * approved arguments (a human's edit), and reports how it ended. A call that
 * may not run returns the reason, so the model reads the reviewer's words
 * rather than ADK's fixed refusal: on resume the tool re-checks Countersign
 * whatever the confirmation says. Each review carries the tool's parameters
 * as JSON Schema (zod's own conversion for a zod 4 object, else ADK's
 * declaration), so Countersign refuses an edit the tool could not take.
 */
import { FunctionTool, type Context, type Event, type Runner, type RunConfig, type Session, type ToolInputParameters, type ToolOptions } from '@google/adk';
import { toJSONSchema, type ZodType } from 'zod';
import { blockedMessage, type Countersign } from './client.js';
import { guarded, objectArguments, schemaObject, type Call } from './toolcalls.js';
import type { Result, RunInfo } from './types.js';

export { receiptOf } from './toolcalls.js';

/** A message to the agent (the `Content` of `@google/genai`), as Runner.runAsync takes it. */
export type Content = Parameters<Runner['runAsync']>[0]['newMessage'];

/** ADK's name of the function call that asks for a tool confirmation. */
export const confirmationCall = 'adk_request_confirmation';

/** Options of gate. */
export interface GateOptions {
  /** The run the calls belong to; its id defaults to the ADK session's id, so every worker finds the same approvals. */
  run?: Partial<RunInfo>;
  /** What a call that may not run returns as its tool result (default: the reason). */
  onBlocked?: (result: Result) => unknown;
}

/** What g.tool takes: ADK's FunctionTool options, less requireConfirmation (the gate's). */
export type GuardedToolOptions<T extends ToolInputParameters> = Omit<ToolOptions<T>, 'requireConfirmation'> & { name: string };

/** The Countersign gate of one agent. */
export interface Gate {
  /**
   * ADK's FunctionTool whose calls Countersign reviews: its
   * requireConfirmation asks the policy, and its execute claims the
   * approval right before it runs, with the approved arguments (the receipt
   * on the tool context: receiptOf(context)), and reports the outcome. A
   * call that may not run returns onBlocked's value (the reason).
   */
  tool<T extends ToolInputParameters>(options: GuardedToolOptions<T>): FunctionTool<T>;
  /**
   * Waits for Countersign's decision on every confirmation of a g.tool call
   * the session leaves open and returns the user message that answers them
   * (undefined when none is open). Aborting `signal` cancels the approvals
   * still pending.
   */
  confirmations(session: Session, options?: { signal?: AbortSignal }): Promise<Content | undefined>;
  /**
   * Resumes a paused run on any worker: answers the open confirmations
   * (confirmations) and runs the agent with the answers, again while the run
   * pauses on new ones; yields the run's events.
   */
  resume(runner: Runner, params: { userId: string; sessionId: string; runConfig?: RunConfig; signal?: AbortSignal }): AsyncGenerator<Event, void, undefined>;
}

/** An open adk_request_confirmation: its id and the call it pins. */
interface OpenConfirmation {
  id: string;
  call: { id: string; name: string; args: Record<string, unknown> };
}

/** gate connects a Countersign client to ADK. */
export function gate(cs: Countersign, options: GateOptions = {}): Gate {
  const onBlocked = options.onBlocked ?? blockedMessage;
  const schemas = new Map<string, Record<string, unknown> | undefined>();
  const runOf = (sessionId: string): RunInfo => ({ ...options.run, id: options.run?.id ?? sessionId });
  const callOf = (id: string | undefined, name: string, args: unknown): Call => {
    const call: Call = { id, name, arguments: objectArguments(args) };
    const schema = schemas.get(name);
    if (schema) call.tool_schema = schema;
    return call;
  };

  const confirmations: Gate['confirmations'] = async (session, opts = {}) => {
    const open = openConfirmations(session.events).filter((c) => schemas.has(c.call.name));
    if (open.length === 0) return undefined;
    const results = await cs.review(
      runOf(session.id),
      open.map((c) => callOf(c.call.id, c.call.name, c.call.args)),
      { wait: true, signal: opts.signal },
    );
    return {
      role: 'user',
      parts: open.map((c, i) => {
        const r = results[i]!;
        const countersign = { verdict: r.verdict, event_id: r.event_id, reason: r.reason };
        return { functionResponse: { id: c.id, name: confirmationCall, response: { confirmed: r.verdict === 'allowed', payload: { countersign } } } };
      }),
    };
  };

  return {
    tool<T extends ToolInputParameters>(toolOptions: GuardedToolOptions<T>): FunctionTool<T> {
      const name = toolOptions.name;
      const execute = guarded(cs, toolOptions.execute as (input: unknown, context?: Context) => unknown, {
        name,
        run: (context) => runOf(context!.sessionId),
        schema: async () => schemas.get(name),
        callId: (context) => context?.functionCallId,
        signal: (context) => context?.abortSignal,
        perCall: 0,
        onBlocked,
      });
      const requireConfirmation = async (input: unknown, context?: Context): Promise<boolean> => {
        if (!context) return true;
        // On resume ADK runs the call with the human's answer: execute asks Countersign itself.
        if (context.toolConfirmation) return false;
        // The call paused for a confirmation before: ADK checks, as it takes the answer, that the gate stands.
        if (confirmationRequests(context.invocationContext.session.events).some((c) => c.call.id === context.functionCallId)) return true;
        const [r] = await cs.review(runOf(context.sessionId), [callOf(context.functionCallId, name, input)], { signal: context.abortSignal });
        return r!.verdict === 'pending';
      };
      const tool = new FunctionTool<T>({ ...toolOptions, execute: execute as ToolOptions<T>['execute'], requireConfirmation });
      schemas.set(name, parametersSchema(toolOptions.parameters, tool));
      return tool;
    },

    confirmations,

    async *resume(runner, params) {
      for (;;) {
        const session = await runner.sessionService.getSession({ appName: runner.appName, userId: params.userId, sessionId: params.sessionId });
        if (!session) throw new Error(`no ADK session ${params.sessionId} of user ${params.userId} in app ${runner.appName}`);
        const newMessage = await confirmations(session, { signal: params.signal });
        if (!newMessage) return;
        yield* runner.runAsync({ userId: params.userId, sessionId: params.sessionId, newMessage, runConfig: params.runConfig, abortSignal: params.signal });
      }
    },
  };
}

/**
 * The adk_request_confirmation calls among events that no later user event
 * answers, each with the call it pins (originalFunctionCall).
 */
export function openConfirmations(events: readonly Event[]): OpenConfirmation[] {
  const answered = new Set<string>();
  for (const e of events) {
    if (e.author !== 'user') continue;
    for (const p of e.content?.parts ?? []) if (p.functionResponse?.name === confirmationCall && p.functionResponse.id) answered.add(p.functionResponse.id);
  }
  return confirmationRequests(events).filter((c) => !answered.has(c.id));
}

/** Every adk_request_confirmation call the agent made among events, answered or not. */
function confirmationRequests(events: readonly Event[]): OpenConfirmation[] {
  const out: OpenConfirmation[] = [];
  for (const e of events) {
    if (e.author === 'user') continue;
    for (const p of e.content?.parts ?? []) {
      const fc = p.functionCall;
      if (fc?.name !== confirmationCall || !fc.id) continue;
      const pinned = (fc.args as Record<string, any> | undefined)?.originalFunctionCall;
      if (typeof pinned?.id !== 'string' || typeof pinned?.name !== 'string') continue;
      out.push({ id: fc.id, call: { id: pinned.id, name: pinned.name, args: objectArguments(pinned.args) } });
    }
  }
  return out;
}

/** The tool's parameters as JSON Schema: zod's conversion of a zod 4 object, else ADK's declaration. */
function parametersSchema(parameters: ToolInputParameters, tool: FunctionTool<any>): Record<string, unknown> | undefined {
  if (parameters && typeof parameters === 'object' && '_zod' in parameters) return schemaObject(toJSONSchema(parameters as unknown as ZodType));
  const declared = tool._getDeclaration().parameters;
  return declared ? schemaObject(genaiToJSONSchema(declared)) : undefined;
}

/**
 * A Gemini Schema (types in capitals: OBJECT, STRING, …; `nullable`) as
 * JSON Schema: ADK declares zod 3 objects and hand-written parameters so.
 */
export function genaiToJSONSchema(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(genaiToJSONSchema);
  if (typeof schema !== 'object' || schema === null) return schema;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema)) {
    switch (k) {
      case 'type':
        out.type = typeof v === 'string' ? v.toLowerCase() : v;
        break;
      case 'nullable':
        break;
      case 'properties':
        out.properties = Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([p, s]) => [p, genaiToJSONSchema(s)]));
        break;
      case 'items':
      case 'anyOf':
        out[k] = genaiToJSONSchema(v);
        break;
      case 'propertyOrdering':
        break;
      case 'minItems':
      case 'maxItems':
      case 'minLength':
      case 'maxLength':
      case 'minProperties':
      case 'maxProperties':
        // int64 fields, which Gemini's Schema writes as strings.
        out[k] = Number(v);
        break;
      default:
        out[k] = v;
    }
  }
  if ((schema as { nullable?: boolean }).nullable && typeof out.type === 'string') out.type = [out.type, 'null'];
  return out;
}
