import { CountersignError } from './errors.js';
import type { Decided } from './types.js';
import type { HumanInputRequest, ToolApprovalRequest } from './schema.gen.js';

/** Codes of a webhook that fails verification (status 401, or 400 for malformed headers). */
export const WebhookCodes = {
  missingHeaders: 'webhook_missing_headers',
  badTimestamp: 'webhook_bad_timestamp',
  tooOld: 'webhook_too_old',
  tooNew: 'webhook_too_new',
  noMatchingSignature: 'webhook_no_matching_signature',
  invalidSecret: 'webhook_invalid_secret',
  invalidBody: 'webhook_invalid_body',
} as const;

/** A verified webhook. */
export interface WebhookMessage {
  /** webhook-id: the same on every retry of one notification; de-duplicate on it. */
  id: string;
  /** webhook-timestamp, unix seconds. */
  timestamp: number;
  /** countersign-kind: requested, reminder.<n>, escalation.<n> or decided. */
  kind: string | undefined;
  /** The body: an outcome or a request. */
  payload: Decided | ToolApprovalRequest | HumanInputRequest;
}

/** Headers as fetch's Headers, or a plain object as node:http gives them. */
export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** The receiver's clock (default: now). */
  now?: Date | number;
  /** How far webhook-timestamp may be from now, either way (default 300 s). */
  toleranceSeconds?: number;
}

function header(h: HeaderSource, name: string): string | undefined {
  if (typeof (h as Headers).get === 'function') return (h as Headers).get(name) ?? undefined;
  const rec = h as Record<string, string | string[] | undefined>;
  for (const k of Object.keys(rec)) {
    if (k.toLowerCase() === name) {
      const v = rec[k];
      return Array.isArray(v) ? v.join(' ') : v;
    }
  }
  return undefined;
}

function decodeBase64(s: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) return undefined;
  try {
    const bin = atob(s);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  } catch {
    return undefined;
  }
}

/**
 * parseSecret decodes a Standard Webhooks secret: "whsec_" and standard
 * base64 of 24 to 64 bytes (the prefix may be left out). Errors never
 * contain the secret.
 */
export function parseSecret(secret: string): Uint8Array<ArrayBuffer> {
  const s = secret.trim().replace(/^whsec_/, '');
  const key = s ? decodeBase64(s) : undefined;
  if (!key) throw new CountersignError(0, WebhookCodes.invalidSecret, 'the webhook secret is not "whsec_" followed by standard base64');
  if (key.length < 24 || key.length > 64) {
    throw new CountersignError(0, WebhookCodes.invalidSecret, `the webhook secret decodes to ${key.length} bytes, want 24 to 64`);
  }
  return key;
}

/**
 * verifyWebhook checks a webhook from Countersign per Standard Webhooks
 * v1: HMAC-SHA256 under the secret of "<webhook-id>.<webhook-timestamp>.<body>",
 * compared in constant time, any of the space-separated "v1,<base64>"
 * signatures matching any of the secrets (give the old and the new during a
 * rotation), and a timestamp within the tolerance. body must be the raw
 * bytes received, before any JSON parsing. It returns the message with its
 * parsed payload, or throws a CountersignError with a webhook_* code.
 *
 * It does not remember webhook-ids: drop one already processed (see
 * webhookReceiver), since a webhook may be delivered more than once.
 */
export async function verifyWebhook(
  secret: string | string[],
  headers: HeaderSource,
  body: string | Uint8Array,
  options: VerifyOptions = {},
): Promise<WebhookMessage> {
  const keys = (Array.isArray(secret) ? secret : [secret]).map(parseSecret);
  const id = header(headers, 'webhook-id');
  const ts = header(headers, 'webhook-timestamp');
  const sigs = (header(headers, 'webhook-signature') ?? '').split(/\s+/).filter(Boolean);
  if (!id || !ts || sigs.length === 0) {
    throw new CountersignError(400, WebhookCodes.missingHeaders, 'missing webhook-id, webhook-timestamp or webhook-signature header');
  }
  if (!/^[0-9]{1,18}$/.test(ts)) throw new CountersignError(400, WebhookCodes.badTimestamp, 'webhook-timestamp is not a unix time in seconds');
  const sent = Number(ts);
  const now = options.now === undefined ? Date.now() : typeof options.now === 'number' ? options.now : options.now.getTime();
  const tolerance = (options.toleranceSeconds ?? 300) * 1000;
  if (now - sent * 1000 > tolerance) throw new CountersignError(401, WebhookCodes.tooOld, 'webhook-timestamp is too old');
  if (sent * 1000 - now > tolerance) throw new CountersignError(401, WebhookCodes.tooNew, 'webhook-timestamp is too far in the future');

  const bodyBytes = typeof body === 'string' ? new TextEncoder().encode(body) : body;
  const prefix = new TextEncoder().encode(`${id}.${ts}.`);
  const signed = new Uint8Array(prefix.length + bodyBytes.length);
  signed.set(prefix);
  signed.set(bodyBytes, prefix.length);
  const subtle = globalThis.crypto.subtle;
  let ok = false;
  for (const k of keys) {
    const key = await subtle.importKey('raw', k, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
    for (const s of sigs) {
      const comma = s.indexOf(',');
      if (comma < 0 || s.slice(0, comma) !== 'v1') continue;
      const got = decodeBase64(s.slice(comma + 1));
      if (!got || got.length !== 32) continue;
      // subtle.verify compares in constant time.
      if (await subtle.verify('HMAC', key, got, signed)) ok = true;
    }
  }
  if (!ok) throw new CountersignError(401, WebhookCodes.noMatchingSignature, 'no webhook-signature matches');
  let payload: WebhookMessage['payload'];
  try {
    payload = JSON.parse(typeof body === 'string' ? body : new TextDecoder().decode(body));
  } catch (err) {
    throw new CountersignError(400, WebhookCodes.invalidBody, 'the webhook body is not JSON', undefined, { cause: err });
  }
  return { id, timestamp: sent, kind: header(headers, 'countersign-kind'), payload };
}

/** What a webhook receiver does with verified messages. */
export interface WebhookReceiverOptions extends VerifyOptions {
  /** The endpoint's secrets ("whsec_..."); several during a rotation. */
  secret: string | string[];
  /** Called once per outcome: resume the run the decision belongs to here. */
  onDecided: (decided: Decided, message: WebhookMessage) => unknown | Promise<unknown>;
  /** Called for a request, reminder or escalation (optional). */
  onRequested?: (request: ToolApprovalRequest | HumanInputRequest, message: WebhookMessage) => unknown | Promise<unknown>;
  /** How many webhook-ids to remember for de-duplication (default 10 000). */
  remember?: number;
}

/** A webhook endpoint: verify, de-duplicate, dispatch. */
export interface WebhookReceiver {
  /** Handles one delivery; answer with the returned status (2xx: done, 4xx: refused, 5xx: retry later). */
  handle(headers: HeaderSource, body: string | Uint8Array): Promise<{ status: number; error?: CountersignError }>;
  /** The same for fetch-style servers (Next.js route handlers, Hono, Deno, Bun). */
  fetch(request: Request): Promise<Response>;
}

/**
 * webhookReceiver verifies each delivery, drops a webhook-id it has already
 * handled, and hands outcomes to onDecided — the place to resume the paused
 * run. If the callback throws, the delivery answers 500 and Countersign
 * delivers it again later.
 *
 * The webhook-ids it handled are remembered in memory, in this process
 * (the last `remember`): another replica of the receiver, or this one
 * after a restart, may get the same delivery again. A receiver with
 * several replicas makes onDecided idempotent, or records each webhook-id
 * in storage its replicas share and skips those already there.
 */
export function webhookReceiver(options: WebhookReceiverOptions): WebhookReceiver {
  options.secret = Array.isArray(options.secret) ? options.secret : [options.secret];
  options.secret.forEach(parseSecret); // fail at start-up, not on the first delivery
  const max = options.remember ?? 10_000;
  const done = new Set<string>();
  const inFlight = new Map<string, Promise<void>>();
  const handle = async (headers: HeaderSource, body: string | Uint8Array) => {
    let msg: WebhookMessage;
    try {
      msg = await verifyWebhook(options.secret, headers, body, options);
    } catch (err) {
      if (err instanceof CountersignError) return { status: err.status || 400, error: err };
      throw err;
    }
    if (done.has(msg.id)) return { status: 200 };
    const running = inFlight.get(msg.id);
    if (running) {
      await running;
      return { status: 200 };
    }
    const work = (async () => {
      const p = msg.payload as { spec?: string };
      if (p.spec === 'countersign.approval.decided/v1') await options.onDecided(msg.payload as Decided, msg);
      else if (options.onRequested) await options.onRequested(msg.payload as ToolApprovalRequest, msg);
    })();
    inFlight.set(msg.id, work);
    try {
      await work;
      done.add(msg.id);
      if (done.size > max) done.delete(done.values().next().value!);
      return { status: 200 };
    } catch {
      return { status: 500 };
    } finally {
      inFlight.delete(msg.id);
    }
  };
  return {
    handle,
    async fetch(request: Request) {
      const body = new Uint8Array(await request.arrayBuffer());
      const { status, error } = await handle(request.headers, body);
      return new Response(error ? JSON.stringify({ error: { code: error.code, message: error.message } }) : null, {
        status,
        headers: error ? { 'content-type': 'application/json' } : {},
      });
    },
  };
}
