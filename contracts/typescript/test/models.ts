// Scripted models: no network, no API key. Each plugs into its framework
// through the framework's own model interface and decides from the
// conversation it is given, so a run resumed in another process sees the
// same model.
import { Usage, type Model, type ModelRequest, type ModelResponse } from '@openai/agents';
import { MockLanguageModelV4 } from 'ai/test';

export interface ScriptedCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

/**
 * An OpenAI Agents SDK Model: on a conversation with no tool result yet it
 * calls the tools in `calls`; once every call has a result it answers with
 * a text that quotes the results, so tests can see what the model saw.
 */
export class ScriptedAgentsModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(readonly calls: ScriptedCall[]) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    const items = Array.isArray(request.input) ? request.input : [];
    const results = items.filter((i: any) => i.type === 'function_call_result') as any[];
    if (results.length === 0) {
      return {
        usage: new Usage(),
        output: this.calls.map((c) => ({
          type: 'function_call' as const,
          callId: c.id,
          name: c.name,
          arguments: JSON.stringify(c.arguments),
          status: 'completed' as const,
        })),
      };
    }
    const text = results.map((r) => `${r.callId}: ${typeof r.output === 'string' ? r.output : r.output?.text}`).join('\n');
    return {
      usage: new Usage(),
      output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] }],
    };
  }

  // The tests run without streaming.
  async *getStreamedResponse(): AsyncIterable<any> {
    throw new Error('ScriptedAgentsModel does not stream');
  }
}

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/**
 * An AI SDK language model (the SDK's own MockLanguageModelV4 from ai/test)
 * with the same script: tool calls first, then a text quoting the results.
 */
export function scriptedAiModel(calls: ScriptedCall[]) {
  const prompts: any[] = [];
  const model = new MockLanguageModelV4({
    doGenerate: async (opts) => {
      prompts.push(opts.prompt);
      const results = opts.prompt.flatMap((m: any) => (m.role === 'tool' ? m.content : [])).filter((p: any) => p.type === 'tool-result');
      if (results.length === 0) {
        return {
          content: calls.map((c) => ({ type: 'tool-call' as const, toolCallId: c.id, toolName: c.name, input: JSON.stringify(c.arguments) })),
          finishReason: { unified: 'tool-calls' as const, raw: undefined },
          usage,
          warnings: [],
        };
      }
      const text = results
        .map((r: any) => `${r.toolCallId}: ${r.output.type === 'execution-denied' ? 'denied: ' + r.output.reason : JSON.stringify(r.output.value)}`)
        .join('\n');
      return { content: [{ type: 'text' as const, text }], finishReason: { unified: 'stop' as const, raw: undefined }, usage, warnings: [] };
    },
  });
  return { model, prompts };
}
