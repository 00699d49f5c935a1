// The test harness: a real `countersign serve` built from this repository,
// with an embedded NATS server under a temporary data directory, a policy
// for the tests, an approver directory (alice), and optional webhooks.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Countersign, parseEvents, type ApprovalRecord, type ToolApprovalRequest, type HumanInputRequest } from '@countersign/client';

const here = path.dirname(fileURLToPath(import.meta.url));
/** contracts/typescript, from build-test/test. */
export const pkgDir = path.resolve(here, '../..');
const repoRoot = path.resolve(pkgDir, '../..');

export const testPolicy = `version: "ts-client-test-1"
default: require_approval
rules:
  - name: lookups
    tools: ["lookup_*"]
    action: allow
  - name: no-shell
    tools: ["shell.*"]
    action: deny
    reason: "Agents may not run shell commands."
  - name: payments
    tools: ["payments.*", "payments_*"]
    action: require_approval
    risk: high
    summary: "Pay {{args.amount}} to {{args.recipient}}"
    allowed_decisions: [approve, reject, edit, respond]
  - name: deploys
    tools: ["deploy_*"]
    action: require_approval
    claim_within: 1s
`;

/** The subject of the development token: serve names it after $USER, which the harness sets. */
export const agentSubject = 'ts-test-developer';

let built: Promise<string> | undefined;

/** The countersign binary, built once per test process with the Go toolchain ($COUNTERSIGN_BIN: one built already). */
export function binary(): Promise<string> {
  built ??= (async () => {
    if (process.env.COUNTERSIGN_BIN) return process.env.COUNTERSIGN_BIN;
    const dir = await mkdtemp(path.join(tmpdir(), 'countersign-bin-'));
    const bin = path.join(dir, 'countersign');
    await promisify(execFile)('go', ['build', '-o', bin, './services/countersign'], { cwd: repoRoot });
    return bin;
  })();
  return built;
}

export interface ServerOptions {
  policy?: string;
  /** Extra lines of countersign.yaml (e.g. notify: webhooks). */
  config?: string;
  env?: Record<string, string>;
}

/** A running server and clients of it. */
export class Server {
  url = '';
  /** The development token: agent, approver and admin. */
  token = '';
  /** alice's approver token, from the directory. */
  readonly aliceToken = 'alice-' + randomBytes(24).toString('hex');
  /** An agent token of another subject (other-agent), from the directory. */
  readonly otherAgentToken = 'other-' + randomBytes(24).toString('hex');
  dataDir = '';
  #proc: ChildProcess | undefined;
  #stderr: string[] = [];
  #requests: Array<ToolApprovalRequest | HumanInputRequest> = [];
  #waiters: Array<() => void> = [];
  #feed = new AbortController();
  /** The port of the first start, kept by every restart. */
  #port = 0;

  private constructor(readonly options: ServerOptions) {}

  static async start(options: ServerOptions = {}): Promise<Server> {
    const s = new Server(options);
    s.dataDir = await mkdtemp(path.join(tmpdir(), 'countersign-ts-'));
    await s.#launch();
    await s.#follow();
    return s;
  }

  async #launch(): Promise<void> {
    const bin = await binary();
    const policy = path.join(this.dataDir, 'policy.yaml');
    const directory = path.join(this.dataDir, 'directory.yaml');
    const config = path.join(this.dataDir, 'countersign.yaml');
    await writeFile(policy, this.options.policy ?? testPolicy);
    const hash = createHash('sha256').update(this.aliceToken).digest('hex');
    const other = createHash('sha256').update(this.otherAgentToken).digest('hex');
    await writeFile(
      directory,
      `users:\n  - id: alice\n    name: Alice\n    email: alice@example.com\n    tokens:\n      - {name: alice-test, sha256: ${hash}, roles: [approver]}\n` +
        `  - id: other-agent\n    name: Other Agent\n    tokens:\n      - {name: other-agent-test, sha256: ${other}, roles: [agent]}\n`,
    );
    await writeFile(config, `retention: 720h\n${this.options.config ?? ''}`);
    const proc = spawn(
      bin,
      ['serve', '--config', config, '--data', this.dataDir, '--addr', `127.0.0.1:${this.#port}`, '--nats-listen', 'off',
        '--policy', policy, '--directory', directory, '--log-level', 'warn', '--sync', 'lazy'],
      { env: { ...process.env, USER: agentSubject, ...this.options.env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.#proc = proc;
    proc.stderr!.setEncoding('utf8').on('data', (d: string) => {
      this.#stderr.push(d);
      if (this.#stderr.length > 200) this.#stderr.shift();
    });
    this.url = await new Promise<string>((resolve, reject) => {
      let out = '';
      const onData = (d: string) => {
        out += d;
        const m = /API:\s+(http:\/\/\S+?)\/v1\b/.exec(out);
        if (m) {
          proc.stdout!.off('data', onData);
          resolve(m[1]!);
        }
      };
      proc.stdout!.setEncoding('utf8').on('data', onData);
      proc.once('exit', (code) => reject(new Error(`countersign serve exited (${code}) before it was ready:\n${this.#stderr.join('')}`)));
    });
    proc.stdout!.resume();
    this.#port = Number(new URL(this.url).port);
    this.token = (await readFile(path.join(this.dataDir, 'dev-token'), 'utf8')).trim();
  }

  /** Kills the server at once (SIGKILL): no shutdown, whatever it was doing. */
  async kill(): Promise<void> {
    this.#feed.abort();
    const p = this.#proc;
    if (p && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await exited;
    }
  }

  /** Starts the server again on the same data directory and port, once it is ready. */
  async restart(): Promise<void> {
    await this.kill();
    this.#feed = new AbortController();
    await this.#launch();
    await this.#follow();
  }

  /** Follows the server's event stream, so tests can wait for a request by signal, not by polling. */
  async #follow(): Promise<void> {
    const resp = await fetch(this.url + '/v1/events', {
      headers: { Authorization: `Bearer ${this.token}` },
      signal: this.#feed.signal,
    });
    if (!resp.ok || !resp.body) throw new Error(`GET /v1/events: ${resp.status}`);
    (async () => {
      try {
        for await (const ev of parseEvents(resp.body!)) {
          if (ev.event !== 'requested') continue;
          this.#requests.push(JSON.parse(ev.data));
          for (const w of this.#waiters.splice(0)) w();
        }
      } catch {
        /* the feed ends with the server */
      }
    })();
  }

  /** The first request (newest feed order) matching pred, waiting for it to arrive. */
  async requested(pred: (r: ToolApprovalRequest | HumanInputRequest) => boolean): Promise<ToolApprovalRequest | HumanInputRequest> {
    for (;;) {
      const found = this.#requests.find(pred);
      if (found) return found;
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  /** The request of a tool call, by run id and tool call id. */
  requestFor(runId: string, callId: string): Promise<ToolApprovalRequest | HumanInputRequest> {
    return this.requested((r) => r.run.id === runId && r.tool_call?.id === callId);
  }

  /** The approval's record once it is decided (long polls, no sleeping). */
  async decided(eventId: string): Promise<ApprovalRecord> {
    for (;;) {
      const { record } = await this.agentClient().approval(eventId, { waitMs: 30_000 });
      if (record.status !== 'pending') return record;
    }
  }

  /** A client with the development token (the agent). */
  agentClient(agent = 'ts-agent'): Countersign {
    return new Countersign({ url: this.url, token: this.token, agent });
  }

  /** A client with the token of another agent (other-agent). */
  otherAgent(agent = 'ts-agent'): Countersign {
    return new Countersign({ url: this.url, token: this.otherAgentToken, agent });
  }

  /** A client with alice's approver token. */
  alice(): Countersign {
    return new Countersign({ url: this.url, token: this.aliceToken });
  }

  /** The last lines the server logged, for failure messages. */
  get logs(): string {
    return this.#stderr.join('');
  }

  async stop(): Promise<void> {
    this.#feed.abort();
    const p = this.#proc;
    if (p && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      await exited;
    }
    await rm(this.dataDir, { recursive: true, force: true });
  }
}

/**
 * A server for the docs' snippets: under the policy make run applies, its
 * address and token in this process's environment (COUNTERSIGN_URL,
 * COUNTERSIGN_TOKEN), as a reader runs them.
 */
export async function snippetServer(): Promise<Server> {
  const server = await Server.start({ policy: await readFile(path.join(pkgDir, '../../deploy/policy.yaml'), 'utf8') });
  process.env.COUNTERSIGN_URL = server.url;
  process.env.COUNTERSIGN_TOKEN = server.token;
  return server;
}

let seq = 0;
/** A run id unique to this test process. */
export function runId(prefix = 'run'): string {
  return `${prefix}-${process.pid}-${Date.now()}-${++seq}`;
}
