// A spy on the requests a client sends, through the client's `fetch` option.
import { Countersign, type CountersignOptions } from '@countersign/client';
import type { Server } from './harness.js';

export interface Sent {
  method: string;
  path: string;
  body: string;
}

/**
 * The requests a client sends, seen before they go out: a test waits for
 * the one it needs (the signal that the client is where the test wants it)
 * and may hold a request back or act just before it is sent.
 */
export class Spy {
  readonly sent: Sent[] = [];
  #waiters: Array<() => void> = [];
  /** Runs before a request is sent; a promise it returns is awaited first. */
  before: ((s: Sent, signal: AbortSignal | undefined) => Promise<void> | void) | undefined;

  readonly fetch: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    const s: Sent = { method: init?.method ?? 'GET', path: url.pathname + url.search, body: String(init?.body ?? '') };
    this.sent.push(s);
    for (const w of this.#waiters.splice(0)) w();
    await this.before?.(s, init?.signal ?? undefined);
    return globalThis.fetch(input, init);
  };

  /** The agent's client (the development token), sending through the spy. */
  client(server: Server, options: CountersignOptions = {}): Countersign {
    return new Countersign({ url: server.url, token: server.token, agent: 'ts-agent', fetch: this.fetch, ...options });
  }

  /** Resolves once the client has sent a request matching pred. */
  async until(pred: (s: Sent) => boolean): Promise<Sent> {
    for (;;) {
      const found = this.sent.find(pred);
      if (found) return found;
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  cancels(eventId: string): Sent[] {
    return this.sent.filter((s) => s.method === 'POST' && s.path === `/v1/approvals/${eventId}/cancel`);
  }
}

/** A review's long poll: the client waits for decisions. */
export const inLongPoll = (s: Sent) => s.method === 'POST' && s.path.startsWith('/v1/reviews?wait=');
