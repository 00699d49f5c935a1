// A fault-injecting HTTP proxy in front of the real server: it forwards
// requests unchanged, and on command answers 503 or 202, drops connections,
// or refuses to forward, so retries and reconnects are tested against the
// real API with real failures in between.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type Fault = 'status503' | 'accepted202' | 'drop';

export interface Seen {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  fault?: Fault;
}

export class FaultProxy {
  url = '';
  readonly seen: Seen[] = [];
  /** Faults to inject, in order, on the requests whose path matches. */
  faults: Array<{ match: RegExp; fault: Fault }> = [];
  /** While set, event-stream requests are answered 503 (the stream is "down"). */
  streamDown = false;
  #server: http.Server;
  #streams = new Set<http.ServerResponse>();
  #opened = 0;
  #waiters: Array<() => void> = [];

  constructor(readonly target: string) {
    this.#server = http.createServer((req, res) => this.#handle(req, res));
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  /** Resolves once a request matching pred has been seen. */
  async sawRequest(pred: (s: Seen) => boolean): Promise<Seen> {
    for (;;) {
      const s = this.seen.find(pred);
      if (s) return s;
      await new Promise<void>((r) => this.#waiters.push(r));
    }
  }

  /** Resolves once n event streams have been opened through the proxy (the server answered them). */
  async streamsOpened(n: number): Promise<void> {
    while (this.#opened < n) await new Promise<void>((r) => this.#waiters.push(r));
  }

  /** Cuts every open event stream. */
  cutStreams(): void {
    for (const res of this.#streams) res.socket?.destroy();
    this.#streams.clear();
  }

  async stop(): Promise<void> {
    this.cutStreams();
    this.#server.closeAllConnections();
    await new Promise((r) => this.#server.close(r));
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const seen: Seen = { method: req.method!, path: req.url!, headers: req.headers, body: body.toString() };
    const i = this.faults.findIndex((f) => f.match.test(req.url!));
    if (i >= 0) seen.fault = this.faults.splice(i, 1)[0]!.fault;
    const isStream = req.url!.startsWith('/v1/events');
    if (isStream && this.streamDown) seen.fault = 'status503';
    this.seen.push(seen);
    for (const w of this.#waiters.splice(0)) w();
    switch (seen.fault) {
      case 'drop':
        req.socket.destroy();
        return;
      case 'status503':
        res.writeHead(503, { 'content-type': 'application/json' });
        res.end('{"error":{"code":"unavailable","message":"injected by the test proxy"}}');
        return;
      case 'accepted202':
        res.writeHead(202, { 'content-type': 'application/json' });
        res.end('{"status":"in_flight"}');
        return;
    }
    const headers = { ...req.headers };
    delete headers.host;
    const upstream = new AbortController();
    res.on('close', () => upstream.abort());
    const up = await fetch(this.target + req.url, {
      signal: upstream.signal,
      method: req.method,
      headers: headers as Record<string, string>,
      body: body.length ? body : undefined,
    });
    res.writeHead(up.status, Object.fromEntries(up.headers));
    if (isStream) {
      this.#streams.add(res);
      res.on('close', () => this.#streams.delete(res));
      res.flushHeaders();
      this.#opened++;
      for (const w of this.#waiters.splice(0)) w();
    }
    if (!up.body) return void res.end();
    try {
      for await (const chunk of up.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
      res.end();
    } catch {
      res.destroy();
    }
  }
}
