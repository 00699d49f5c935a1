// A scripted model for Google's ADK: the framework's own BaseLlm, with no
// network. On a conversation with no function response yet it calls the
// tools it was given; once each call has a response it answers with a text
// that quotes them, so tests see what the model saw. It decides from the
// request alone, so a run resumed in another process sees the same model.
import { BaseLlm, type BaseLlmConnection, type LlmRequest, type LlmResponse } from '@google/adk';

export interface ScriptedCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export class ScriptedAdkModel extends BaseLlm {
  readonly requests: LlmRequest[] = [];
  constructor(readonly calls: ScriptedCall[]) {
    super({ model: 'scripted' });
  }

  async *generateContentAsync(request: LlmRequest): AsyncGenerator<LlmResponse, void> {
    this.requests.push(request);
    const responses = request.contents.flatMap((c) => c.parts ?? []).flatMap((p) => (p.functionResponse ? [p.functionResponse] : []));
    if (responses.length === 0) {
      yield {
        content: { role: 'model', parts: this.calls.map((c) => ({ functionCall: { id: c.id, name: c.name, args: c.arguments } })) },
        turnComplete: true,
      };
      return;
    }
    const text = responses.map((r) => `${r.id}: ${JSON.stringify(r.response)}`).join('\n');
    yield { content: { role: 'model', parts: [{ text }] }, turnComplete: true };
  }

  async connect(): Promise<BaseLlmConnection> {
    throw new Error('ScriptedAdkModel does not stream live');
  }
}
