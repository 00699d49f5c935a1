// A scripted model behind a local endpoint that speaks Anthropic's Messages
// API (streamed), for the Claude Agent SDK, whose agent loop runs in the
// Claude Code process and reaches the model only over HTTP. On a
// conversation with no tool result yet it calls the tools of its script;
// once every call has a result it answers with a text quoting the results.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ScriptedUse {
  id: string;
  /** The tool's name as the model sees it (mcp__<server>__<tool> for an MCP tool). */
  name: string;
  input: Record<string, unknown>;
}

export class AnthropicModel {
  readonly requests: any[] = [];
  #server: http.Server;
  url = '';

  constructor(readonly uses: ScriptedUse[]) {
    this.#server = http.createServer((req, res) => void this.#answer(req, res));
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  /** The environment of a query() whose model is this one. */
  env(configDir: string): Record<string, string | undefined> {
    return {
      ...process.env,
      ANTHROPIC_BASE_URL: this.url,
      ANTHROPIC_API_KEY: 'sk-ant-test',
      CLAUDE_CONFIG_DIR: configDir,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_AUTOUPDATER: '1',
    };
  }

  async #answer(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of req) text += chunk;
    const url = new URL(req.url ?? '/', 'http://x');
    if (req.method !== 'POST' || url.pathname !== '/v1/messages') {
      res.writeHead(url.pathname === '/v1/messages/count_tokens' ? 200 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify(url.pathname === '/v1/messages/count_tokens' ? { input_tokens: 1 } : { type: 'error', error: { type: 'not_found_error', message: 'not here' } }));
      return;
    }
    const body = JSON.parse(text);
    this.requests.push(body);
    const results = (body.messages as any[])
      .flatMap((m) => (Array.isArray(m.content) ? m.content : []))
      .filter((c: any) => c.type === 'tool_result');
    const content =
      results.length === 0
        ? this.uses.map((u) => ({ type: 'tool_use', id: u.id, name: u.name, input: u.input }))
        : [{ type: 'text', text: results.map((r: any) => `${r.tool_use_id}: ${firstText(r.content)}`).join('\n') }];
    const stop = results.length === 0 ? 'tool_use' : 'end_turn';
    const message = { id: `msg_${this.requests.length}`, type: 'message', role: 'assistant', model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } };
    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ...message, content, stop_reason: stop }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const send = (type: string, data: object) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
    send('message_start', { message });
    content.forEach((c: any, index) => {
      if (c.type === 'text') {
        send('content_block_start', { index, content_block: { type: 'text', text: '' } });
        send('content_block_delta', { index, delta: { type: 'text_delta', text: c.text } });
      } else {
        send('content_block_start', { index, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } });
        send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(c.input) } });
      }
      send('content_block_stop', { index });
    });
    send('message_delta', { delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 1 } });
    send('message_stop', {});
    res.end();
  }
}

/** The first text of a tool result's content (the SDK appends reminders after it). */
function firstText(content: unknown): string {
  if (typeof content === 'string') return content.trim();
  const first = Array.isArray(content) ? content.find((c: any) => c.type === 'text') : undefined;
  return String(first?.text ?? '').trim();
}
