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
 * later, on any worker, `await g.approvalResponses(result.content)` waits for
 * Countersign's decisions and returns the tool message to append before
 * calling the model again. Keep the wrapped tools too: they claim each
 * approval right before running and run with a human's edited arguments.
 */
import type { ModelMessage, ToolApprovalResponse, ToolApprovalStatus, ToolSet } from 'ai';
import { blockedMessage, type Countersign } from './client.js';
import type { Result, RunInfo } from './types.js';

/** Options of gate. */
export interface GateOptions {
  /** The run the calls belong to: give its id, so every worker finds the same approvals. */
  run: RunInfo;
  /** What a call that may not run returns as its tool result (default: the reason). */
  onBlocked?: (result: Result) => unknown;
}

/** A tool-approval-request part, as generateText's result.content and response messages hold it. */
interface ApprovalRequestPart {
  type: 'tool-approval-request';
  approvalId: string;
  isAutomatic?: boolean;
  toolCall: { toolCallId: string; toolName: string; input: unknown };
}

/** The Countersign gate of one run. */
export interface Gate {
  /**
   * Wraps every tool's execute: review → wait → claim → run with the
   * approved arguments. When the SDK aborts the call (generateText's
   * `abortSignal`, passed to execute) while it waits, its approval is
   * cancelled.
   */
  tools<T extends ToolSet>(tools: T): T;
  /**
   * The AI SDK's toolApproval hook: calls the policy allows run; calls it
   * denies, or humans rejected, are denied with the reason; others wait for
   * a human (user-approval).
   */
  toolApproval: (options: { toolCall: { toolCallId: string; toolName: string; input: unknown } }) => Promise<ToolApprovalStatus>;
  /**
   * Waits for Countersign's decision on every tool-approval-request in
   * `parts` (result.content, or response messages) and returns the tool
   * message of approval responses to append to the conversation. Aborting
   * `signal` cancels the approvals still pending and rejects with its reason.
   */
  approvalResponses(parts: unknown[], options?: { signal?: AbortSignal }): Promise<ModelMessage | undefined>;
}

/** gate connects a Countersign client to the AI SDK. */
export function gate(cs: Countersign, options: GateOptions): Gate {
  const onBlocked = options.onBlocked ?? blockedMessage;
  return {
    tools(tools) {
      const out: Record<string, unknown> = {};
      for (const [name, t] of Object.entries(tools)) {
        const execute = (t as { execute?: (input: any, opts: any) => any }).execute;
        out[name] = execute ? { ...t, execute: cs.guardFunction(execute, { name, run: options.run, onBlocked }) } : t;
      }
      return out as typeof tools;
    },

    async toolApproval({ toolCall }) {
      const [r] = await cs.review(options.run, [{ id: toolCall.toolCallId, name: toolCall.toolName, arguments: objectOf(toolCall.input) }]);
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
      const requests = collect(parts).filter((p) => !p.isAutomatic);
      if (requests.length === 0) return undefined;
      const results = await cs.review(
        options.run,
        requests.map((p) => ({ id: p.toolCall.toolCallId, name: p.toolCall.toolName, arguments: objectOf(p.toolCall.input) })),
        { wait: true, signal: opts.signal },
      );
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

/** Every tool-approval-request in parts, or in the content of messages among them. */
function collect(parts: unknown[]): ApprovalRequestPart[] {
  const out: ApprovalRequestPart[] = [];
  for (const p of parts) {
    if (typeof p !== 'object' || p === null) continue;
    const o = p as { type?: string; content?: unknown };
    if (o.type === 'tool-approval-request') out.push(o as ApprovalRequestPart);
    else if (Array.isArray(o.content)) out.push(...collect(o.content));
  }
  return out;
}

function objectOf(input: unknown): Record<string, unknown> {
  return typeof input === 'object' && input !== null && !Array.isArray(input) ? (input as Record<string, unknown>) : { input };
}
