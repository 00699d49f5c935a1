/**
 * Verify Countersign receipts: the signed countersignature a tool checks
 * before it runs a call. A receipt is a compact JWS (EdDSA over Ed25519,
 * RFC 8037) the arbiter signs when an approved call is claimed;
 * verifyReceipt checks it, with the jose library, against the tool's own
 * name and the arguments it is about to run, and uses up its id.
 */
import { compactVerify, createLocalJWKSet, createRemoteJWKSet, decodeProtectedHeader, errors as joseErrors } from 'jose';
import type { JSONWebKeySet, JWSHeaderParameters, FlattenedJWSInput } from 'jose';
import { checkDuplicates, parseStrict } from './strict-json.js';
import { CLOCK_SKEW_SECONDS, constantTimeEqual, effectiveSha256, statementTime, verifyAssertion } from './passkey.js';
import type { JWK, PasskeyAssertion } from './passkey.js';

export type { JWK, PasskeyAssertion, PasskeyParty, Statement } from './passkey.js';

export const RECEIPT_TYPE = 'countersign-receipt+jwt';
export const RECEIPT_HEADER = 'countersign-receipt';
export const DEFAULT_ISSUER = 'countersign';
const MAX_RECEIPT_BYTES = 16 << 10;

/** The stable codes of a refused receipt, and the HTTP status to answer with. */
export const ReceiptCodes = {
  missing: 'receipt_missing',
  malformed: 'receipt_malformed',
  unknownKey: 'receipt_unknown_key',
  badSignature: 'receipt_bad_signature',
  wrongIssuer: 'receipt_wrong_issuer',
  expired: 'receipt_expired',
  wrongTool: 'receipt_wrong_tool',
  basisNotAccepted: 'receipt_basis_not_accepted',
  argumentsDiffer: 'receipt_arguments_differ',
  signaturesMissing: 'receipt_signatures_missing',
  signatureInvalid: 'receipt_signature_invalid',
  replayed: 'receipt_replayed',
  unavailable: 'receipt_unavailable',
} as const;
export type ReceiptCode = (typeof ReceiptCodes)[keyof typeof ReceiptCodes];

const statusOf: Record<ReceiptCode, number> = {
  receipt_missing: 401, receipt_malformed: 401, receipt_unknown_key: 401, receipt_bad_signature: 401,
  receipt_wrong_issuer: 401, receipt_expired: 401, receipt_wrong_tool: 403, receipt_basis_not_accepted: 403, receipt_arguments_differ: 403,
  receipt_signatures_missing: 403, receipt_signature_invalid: 403,
  receipt_replayed: 409, receipt_unavailable: 503,
};

/** A refused receipt. */
export class ReceiptError extends Error {
  readonly status: number;
  constructor(readonly code: ReceiptCode, message: string) {
    super(`receipt: ${message}`);
    this.name = 'ReceiptError';
    this.status = statusOf[code];
  }
}

/** The claims of a receipt (see docs/receipts.md). */
export interface ReceiptClaims {
  iss: string;
  jti: string;
  iat: number;
  exp: number;
  event_id?: string;
  claim_id?: string;
  tenant?: string;
  agent: string;
  run_id?: string;
  tool_call_id?: string;
  tool: string;
  args_sha256: string;
  basis: 'approval' | 'grant' | 'policy';
  decided_by?: string[];
  quorum?: { required: number; approvals: number };
  grant?: string;
  rule?: string;
  policy_version?: string;
  /** The rule's step_up ("passkey"): every approval that decided was signed by the approver's own passkey. */
  step_up?: string;
  /** The approvers' WebAuthn assertions over their approval statements (see VerifyReceiptOptions.humans). */
  signatures?: PasskeyAssertion[];
}

/** Finds the key a receipt's header names (jose's key-resolving function). */
export type KeySource = (header: JWSHeaderParameters, token: FlattenedJWSInput) => Promise<CryptoKey | Uint8Array> | CryptoKey | Uint8Array;

/** Pinned keys: a JWKS object (e.g. a copy of /.well-known/jwks.json). */
export function localKeys(jwks: JSONWebKeySet): KeySource {
  return createLocalJWKSet(jwks) as KeySource;
}

/**
 * The issuer's JWKS, fetched and cached (jose's remote key set): refetched
 * after cacheMaxAge (default 5 minutes) and, for a kid it does not hold, at
 * most once per cooldown (default 10 s).
 */
export function remoteKeys(url: string | URL, options?: { cacheMaxAge?: number; cooldown?: number; timeout?: number }): KeySource {
  return createRemoteJWKSet(new URL(url), {
    cacheMaxAge: options?.cacheMaxAge ?? 300_000,
    cooldownDuration: options?.cooldown ?? 10_000,
    timeoutDuration: options?.timeout ?? 10_000,
  }) as KeySource;
}

/** Remembers used receipt ids; use must be atomic across the tool's replicas when they share a store. */
export interface ReplayStore {
  /** Marks id used until `until` (unix seconds); throws ReceiptError(receipt_replayed) if it was. */
  use(id: string, until: number): void | Promise<void>;
}

/** An in-memory ReplayStore: receipts are single-use within the process. */
export class MemoryReplayStore implements ReplayStore {
  private readonly seen = new Map<string, number>();
  constructor(private readonly clock: () => number = () => Date.now() / 1000) {}
  use(id: string, until: number): void {
    const now = this.clock();
    for (const [k, t] of this.seen) if (t < now) this.seen.delete(k);
    if (this.seen.has(id)) throw new ReceiptError(ReceiptCodes.replayed, `receipt ${id} was already used`);
    this.seen.set(id, until);
  }
}

const defaultReplayStore = new MemoryReplayStore();

/** Options of serverReplayStore. */
export interface ServerReplayStoreOptions {
  /** The Countersign API's base URL, e.g. https://countersign.example.com. */
  url: string | URL;
  /** Any valid bearer token of that API (a token of the tool's own). */
  token: string;
  /** The fetch to send requests with (default: the platform's). */
  fetch?: typeof fetch;
  /** How long to wait for the API's answer (default 10 000 ms). */
  timeoutMs?: number;
}

/**
 * serverReplayStore keeps receipt uses in Countersign: each use asks the API
 * (`POST /v1/receipts/use {"jti", "exp"}`) to record the receipt's id, and
 * the first use of an id wins. Every replica of a tool that verifies with a
 * serverReplayStore of the same Countersign refuses a receipt another
 * replica used, and a restarted replica still refuses it, for as long as
 * the receipt is valid: what a tool with several replicas, or one that
 * restarts, uses instead of the in-memory default.
 *
 * It fails closed: a replay throws ReceiptError(receipt_replayed, 409); an
 * API that cannot be reached or answers anything else throws
 * ReceiptError(receipt_unavailable, 503), and the call does not run. A use
 * is not retried: after a lost answer a retry would find the receipt used,
 * by itself.
 */
export function serverReplayStore(options: ServerReplayStoreOptions): ReplayStore {
  const base = new URL(options.url);
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new TypeError(`serverReplayStore: url ${base.href} is not an http(s) URL`);
  if (!options.token) throw new TypeError('serverReplayStore: a token is required');
  const endpoint = base.href.replace(/\/+$/, '').replace(/\/v1$/, '') + '/v1/receipts/use';
  const send = options.fetch ?? globalThis.fetch.bind(globalThis);
  const timeoutMs = options.timeoutMs ?? 10_000;
  return {
    async use(id: string, until: number): Promise<void> {
      let status: number;
      let answer: { used?: unknown; error?: { code?: unknown } } = {};
      try {
        const resp = await send(endpoint, {
          method: 'POST',
          headers: { Authorization: `Bearer ${options.token}`, 'Content-Type': 'application/json', Accept: 'application/json' },
          body: JSON.stringify({ jti: id, exp: Math.ceil(until) }),
          signal: AbortSignal.timeout(timeoutMs),
        });
        status = resp.status;
        const text = await resp.text();
        try {
          const parsed = JSON.parse(text) as unknown;
          if (typeof parsed === 'object' && parsed !== null) answer = parsed as typeof answer;
        } catch {
          /* not the API's answer: judged by its status below */
        }
      } catch (e) {
        throw new ReceiptError(ReceiptCodes.unavailable, `replay store ${endpoint}: ${(e as Error).message}`);
      }
      if (status === 200 && answer.used === true) return;
      const code = typeof answer.error?.code === 'string' ? answer.error.code : undefined;
      if (status === 409 && code === ReceiptCodes.replayed) throw new ReceiptError(ReceiptCodes.replayed, `receipt ${id} was already used`);
      throw new ReceiptError(ReceiptCodes.unavailable, `replay store ${endpoint}: ${code ?? 'HTTP'} (${status})`);
    },
  };
}

export interface VerifyReceiptOptions {
  keys: KeySource;
  /**
   * Where used receipt ids are kept. Default: one in-memory store per
   * process, which refuses a replay only to the process that saw the first
   * use; a tool with several replicas, or one that restarts, uses
   * serverReplayStore (or a ReplayStore on storage its replicas share).
   */
  replay?: ReplayStore;
  /** The iss receipts must carry (default "countersign"). */
  issuer?: string;
  /** The verifier's clock, unix seconds or a Date (default now). */
  now?: number | Date;
  /** Clock skew tolerated on iat and exp, seconds (default 0). */
  leewaySeconds?: number;
  /**
   * How a call must have been allowed for the tool to run it (default: any):
   * ['approval'] runs only what humans approved, ['approval', 'grant'] also
   * calls under a standing grant.
   */
  bases?: ReceiptClaims['basis'][];
  /**
   * Requires the approvers' own passkey signatures: a tool that runs only
   * what named people signed, which neither a compromised agent runtime nor
   * the server's key alone can mint (receipt_signatures_missing,
   * receipt_signature_invalid).
   */
  humans?: Humans;
}

/** RFC 8785 canonical JSON of a parsed JSON value. */
export function canonicalize(value: unknown): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('NaN and Infinity are not JSON numbers');
    return JSON.stringify(value); // ECMAScript Number.prototype.toString, -0 as 0
  }
  if (Array.isArray(value)) return '[' + value.map(canonicalize).join(',') + ']';
  if (typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    // Default sort compares UTF-16 code units, as RFC 8785 requires.
    const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
    return '{' + keys.map((k) => JSON.stringify(k) + ':' + canonicalize(obj[k])).join(',') + '}';
  }
  throw new TypeError(`${typeof value} is not a JSON value`);
}

/** Hex SHA-256 of the RFC 8785 form of tool-call arguments (a JSON value, or its JSON text as bytes). */
export async function argumentsSha256(args: unknown): Promise<string> {
  const value = args instanceof Uint8Array ? parseStrict(new TextDecoder().decode(args) || '{}') : args ?? {};
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(canonicalize(value)));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * Checks that `receipt` allows running `tool` with `args` now, once, and
 * returns its claims; otherwise throws a ReceiptError whose code says why.
 * Only a receipt that passes every other check uses up its id.
 */
export async function verifyReceipt(receipt: string | undefined | null, tool: string, args: unknown, options: VerifyReceiptOptions): Promise<ReceiptClaims> {
  const claims = await inspectReceipt(receipt, options);
  if (claims.tool !== tool) throw new ReceiptError(ReceiptCodes.wrongTool, `the receipt is for tool ${JSON.stringify(claims.tool)}, not ${JSON.stringify(tool)}`);
  if (options.bases?.length && !options.bases.includes(claims.basis)) {
    throw new ReceiptError(ReceiptCodes.basisNotAccepted, `the call was allowed by ${claims.basis}; this tool accepts ${options.bases.join(', ')}`);
  }
  let sha: string;
  try {
    sha = await argumentsSha256(args);
  } catch (e) {
    throw new ReceiptError(ReceiptCodes.argumentsDiffer, `the arguments are not valid JSON: ${(e as Error).message}`);
  }
  if (sha !== claims.args_sha256) throw new ReceiptError(ReceiptCodes.argumentsDiffer, `the arguments' SHA-256 is ${sha}, the receipt allows ${claims.args_sha256}`);
  if (options.humans) await checkHumans(claims, options.humans, options.leewaySeconds ?? 0);
  await (options.replay ?? defaultReplayStore).use(claims.jti, claims.exp + (options.leewaySeconds ?? 0));
  return claims;
}

/** Checks a receipt's signature, issuer and times and returns its claims (not the tool, arguments or replay). */
export async function inspectReceipt(receipt: string | undefined | null, options: VerifyReceiptOptions): Promise<ReceiptClaims> {
  const token = (receipt ?? '').trim();
  if (!token) throw new ReceiptError(ReceiptCodes.missing, 'no receipt');
  if (token.length > MAX_RECEIPT_BYTES) throw new ReceiptError(ReceiptCodes.malformed, `longer than ${MAX_RECEIPT_BYTES} bytes`);
  const parts = token.split('.');
  if (parts.length !== 3) throw new ReceiptError(ReceiptCodes.malformed, 'not a compact JWS (header.payload.signature)');
  let header: JWSHeaderParameters;
  try {
    checkDuplicates(b64text(parts[0]!));
    header = decodeProtectedHeader(token) as JWSHeaderParameters;
  } catch (e) {
    throw new ReceiptError(ReceiptCodes.malformed, `header: ${(e as Error).message}`);
  }
  if (header.alg !== 'EdDSA') throw new ReceiptError(ReceiptCodes.malformed, `alg ${JSON.stringify(header.alg)}, want EdDSA`);
  if (header.typ !== RECEIPT_TYPE) throw new ReceiptError(ReceiptCodes.malformed, `typ ${JSON.stringify(header.typ)}, want ${RECEIPT_TYPE}`);
  if (typeof header.kid !== 'string' || !header.kid) throw new ReceiptError(ReceiptCodes.malformed, 'no kid in the header');
  if (header.crit !== undefined) throw new ReceiptError(ReceiptCodes.malformed, 'critical header parameters are not understood');
  let payload: Uint8Array;
  try {
    ({ payload } = await compactVerify(token, options.keys, { algorithms: ['EdDSA', 'Ed25519'] }));
  } catch (e) {
    throw mapJoseError(e, header.kid);
  }
  const text = new TextDecoder().decode(payload);
  let claims: ReceiptClaims;
  try {
    claims = parseStrict(text) as ReceiptClaims;
  } catch (e) {
    throw new ReceiptError(ReceiptCodes.malformed, `payload: ${(e as Error).message}`);
  }
  checkClaims(claims);
  const issuer = options.issuer ?? DEFAULT_ISSUER;
  if (claims.iss !== issuer) throw new ReceiptError(ReceiptCodes.wrongIssuer, `issuer ${JSON.stringify(claims.iss)}, want ${JSON.stringify(issuer)}`);
  const now = options.now === undefined ? Date.now() / 1000 : options.now instanceof Date ? options.now.getTime() / 1000 : options.now;
  const leeway = options.leewaySeconds ?? 0;
  if (now >= claims.exp + leeway) throw new ReceiptError(ReceiptCodes.expired, `expired at ${new Date(claims.exp * 1000).toISOString()}`);
  if (now + leeway < claims.iat) throw new ReceiptError(ReceiptCodes.expired, `issued in the future (${new Date(claims.iat * 1000).toISOString()})`);
  return claims;
}

function mapJoseError(e: unknown, kid: string): ReceiptError {
  if (e instanceof ReceiptError) return e;
  if (e instanceof joseErrors.JWKSNoMatchingKey) return new ReceiptError(ReceiptCodes.unknownKey, `no key ${JSON.stringify(kid)} in the key set`);
  if (e instanceof joseErrors.JWSSignatureVerificationFailed) return new ReceiptError(ReceiptCodes.badSignature, `the signature does not verify with key ${JSON.stringify(kid)}`);
  if (e instanceof joseErrors.JWKSTimeout || e instanceof joseErrors.JWKSInvalid || !(e instanceof joseErrors.JOSEError)) {
    return new ReceiptError(ReceiptCodes.unavailable, `keys: ${(e as Error).message}`);
  }
  return new ReceiptError(ReceiptCodes.malformed, (e as Error).message);
}

function checkClaims(c: ReceiptClaims): void {
  if (typeof c !== 'object' || c === null || Array.isArray(c)) throw new ReceiptError(ReceiptCodes.malformed, 'the payload is not a JSON object');
  const rec = c as unknown as Record<string, unknown>;
  const missing = ['iss', 'jti', 'agent', 'tool', 'args_sha256', 'basis'].filter((n) => typeof rec[n] !== 'string' || rec[n] === '');
  missing.push(...['iat', 'exp'].filter((n) => !Number.isInteger(rec[n]) || (rec[n] as number) <= 0));
  if (missing.length) throw new ReceiptError(ReceiptCodes.malformed, `claims ${missing.join(', ')} are required`);
  if (c.exp <= c.iat) throw new ReceiptError(ReceiptCodes.malformed, 'exp must be after iat');
  if (!['approval', 'grant', 'policy'].includes(c.basis)) throw new ReceiptError(ReceiptCodes.malformed, `basis ${JSON.stringify(c.basis)} is not approval, grant or policy`);
  if (!/^[0-9a-f]{64}$/.test(c.args_sha256)) throw new ReceiptError(ReceiptCodes.malformed, 'args_sha256 must be 64 lowercase hex digits');
  if (rec.quorum != null) {
    const q = rec.quorum as Record<string, unknown>;
    if (typeof q !== 'object' || Array.isArray(q) || !['required', 'approvals'].every((n) => q[n] == null || Number.isInteger(q[n]))) {
      throw new ReceiptError(ReceiptCodes.malformed, 'quorum must be an object of integers required and approvals');
    }
  }
  if (rec.step_up != null && rec.step_up !== '' && rec.step_up !== 'passkey') throw new ReceiptError(ReceiptCodes.malformed, `step_up ${JSON.stringify(rec.step_up)} is not passkey`);
  if (rec.signatures != null) {
    const sigs = rec.signatures;
    const fields = ['statement', 'credential_id', 'authenticator_data', 'client_data_json', 'signature'];
    const wellFormed = (a: unknown) => a === null || (typeof a === 'object' && !Array.isArray(a) && fields.every((f) => (a as Record<string, unknown>)[f] == null || typeof (a as Record<string, unknown>)[f] === 'string'));
    if (!Array.isArray(sigs) || !sigs.every(wellFormed)) throw new ReceiptError(ReceiptCodes.malformed, 'signatures must be a list of passkey assertions');
    if (sigs.length > 0 && c.basis !== 'approval') throw new ReceiptError(ReceiptCodes.malformed, `signatures on a ${c.basis} receipt: only humans' approvals are signed`);
  }
}

function b64text(s: string): string {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) throw new Error('not base64url');
  const b = atob(s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4));
  return new TextDecoder().decode(Uint8Array.from(b, (ch) => ch.charCodeAt(0)));
}

/** The typ header of the approvers document: refused as a receipt, as a receipt is refused as it. */
export const APPROVERS_TYPE = 'countersign-approvers+jwt';

/** One person's passkey in the approvers document. */
export interface ApproverKey {
  person: string;
  credential_id: string;
  public_key: JWK;
  created_at: string;
  /** Set when the passkey was revoked: its signatures no longer count. */
  revoked_at?: string | null;
}

/**
 * The approvers document (`/.well-known/countersign-approvers`): every
 * enrolled passkey, revoked ones included, and the relying party they are
 * bound to, signed with a receipt key.
 */
export interface Approvers {
  iss: string;
  iat: number;
  exp: number;
  rp_id: string;
  origins: string[];
  approvers: ApproverKey[];
}

/** Gives the approvers document to check signatures against (an ApproversFetcher). */
export interface ApproversSource {
  approvers(): Promise<Approvers>;
}

/**
 * What VerifyReceiptOptions.humans requires: at least `min` distinct people
 * (and at least the quorum the receipt says the rule required) each
 * signed, with a passkey listed and not revoked in `approvers`, the
 * approval statement of exactly this call: this event and tool, the
 * arguments about to run, the decision approve or edit. A receipt without
 * them (a policy or grant receipt, or one the server's key signed alone) is
 * refused with receipt_signatures_missing, and one with any signature that
 * does not hold with receipt_signature_invalid.
 */
export interface Humans {
  /** How many distinct people must have signed (at least 1). */
  min: number;
  /**
   * The published passkeys: an ApproversFetcher, or a document parsed once
   * with parseApprovers and pinned (against a compromised server, which
   * could publish a key of its own).
   */
  approvers: Approvers | ApproversSource;
  /** When set, the only person ids whose signatures count. */
  people?: string[];
  /** How long before the receipt was issued a statement may have been signed, seconds (default 24 hours). */
  maxAgeSeconds?: number;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Checks an approvers document's signature with `keys` (the receipt keys),
 * its type, its issuer (default "countersign") and that it is current at
 * `now`, and returns it. Throws a ReceiptError: receipt_malformed,
 * receipt_unknown_key, receipt_bad_signature, receipt_wrong_issuer or
 * receipt_expired.
 */
export async function parseApprovers(token: string, keys: KeySource, options?: { issuer?: string; now?: number | Date }): Promise<Approvers> {
  const jws = token.trim();
  const parts = jws.split('.');
  if (parts.length !== 3) throw new ReceiptError(ReceiptCodes.malformed, 'approvers document: not a compact JWS');
  let header: JWSHeaderParameters;
  try {
    checkDuplicates(b64text(parts[0]!), false);
    header = decodeProtectedHeader(jws) as JWSHeaderParameters;
  } catch (e) {
    throw new ReceiptError(ReceiptCodes.malformed, `approvers header: ${(e as Error).message}`);
  }
  if (header.alg !== 'EdDSA' || header.typ !== APPROVERS_TYPE || typeof header.kid !== 'string' || !header.kid || header.crit !== undefined) {
    throw new ReceiptError(ReceiptCodes.malformed, `approvers document: header alg ${JSON.stringify(header.alg)} typ ${JSON.stringify(header.typ)}, want EdDSA ${APPROVERS_TYPE} with a kid`);
  }
  let payload: Uint8Array;
  try {
    ({ payload } = await compactVerify(jws, keys, { algorithms: ['EdDSA', 'Ed25519'] }));
  } catch (e) {
    throw mapJoseError(e, header.kid);
  }
  let d: Approvers;
  try {
    d = parseStrict(new TextDecoder().decode(payload), { safeIntegers: false }) as Approvers;
  } catch (e) {
    throw new ReceiptError(ReceiptCodes.malformed, `approvers payload: ${(e as Error).message}`);
  }
  checkApprovers(d);
  const issuer = options?.issuer || DEFAULT_ISSUER;
  if (d.iss !== issuer) throw new ReceiptError(ReceiptCodes.wrongIssuer, `approvers document of issuer ${JSON.stringify(d.iss)}, want ${JSON.stringify(issuer)}`);
  if (nowSeconds(options?.now) >= d.exp) throw new ReceiptError(ReceiptCodes.expired, `the approvers document expired at ${new Date(d.exp * 1000).toISOString()}`);
  if (!d.rp_id || d.origins.length === 0) throw new ReceiptError(ReceiptCodes.malformed, 'approvers document: rp_id and origins are required');
  return d;
}

function checkApprovers(d: Approvers): void {
  const bad = (what: string) => new ReceiptError(ReceiptCodes.malformed, `approvers document: ${what}`);
  if (typeof d !== 'object' || d === null || Array.isArray(d)) throw bad('the payload is not a JSON object');
  const str = (v: unknown) => v == null || typeof v === 'string';
  if (!str(d.iss) || !str(d.rp_id)) throw bad('iss and rp_id must be strings');
  if (!Number.isInteger(d.iat ?? 0) || !Number.isInteger(d.exp ?? 0)) throw bad('iat and exp must be integers');
  d.iss ??= '';
  d.rp_id ??= '';
  d.iat ??= 0;
  d.exp ??= 0;
  d.origins ??= [];
  d.approvers ??= [];
  if (!Array.isArray(d.origins) || !d.origins.every((o) => typeof o === 'string')) throw bad('origins must be a list of strings');
  if (!Array.isArray(d.approvers)) throw bad('approvers must be a list');
  for (const k of d.approvers) {
    if (typeof k !== 'object' || k === null || Array.isArray(k)) throw bad('approvers must be a list of objects');
    const pk = k.public_key as unknown as Record<string, unknown> | null;
    if (!str(k.person) || !str(k.credential_id) || (pk != null && (typeof pk !== 'object' || Array.isArray(pk) || !['kty', 'crv', 'alg', 'x', 'y'].every((f) => str(pk[f]))))) {
      throw bad('an approver is not {person, credential_id, public_key}');
    }
    if ((k.created_at != null && !RFC3339.test(String(k.created_at))) || (k.revoked_at != null && !RFC3339.test(String(k.revoked_at)))) {
      throw bad('created_at and revoked_at must be RFC 3339 times');
    }
  }
}

function nowSeconds(now: number | Date | undefined): number {
  return now === undefined ? Date.now() / 1000 : now instanceof Date ? now.getTime() / 1000 : now;
}

/** Options of ApproversFetcher. */
export interface ApproversFetcherOptions {
  /** The document's URL, e.g. https://countersign.example.com/.well-known/countersign-approvers. */
  url: string | URL;
  /** The keys that verify it: the receipt keys (remoteKeys or localKeys). */
  keys: KeySource;
  /** The iss the document must carry (default "countersign"). */
  issuer?: string;
  /** How long a fetched document is used, seconds (default 60): a revoked passkey stops passing at most this long after its revocation. */
  ttlSeconds?: number;
  /** How long to wait for the document, milliseconds (default 10 000). */
  timeoutMs?: number;
  /** The fetch to send requests with (default: the platform's). */
  fetch?: typeof fetch;
  /** The clock, unix seconds (default now). */
  now?: () => number;
}

const MAX_APPROVERS_BYTES = 4 << 20;

/**
 * Fetches the approvers document over HTTP, verifies it (parseApprovers)
 * and caches it for ttlSeconds. It fails closed: a document that cannot be
 * fetched (receipt_unavailable) or does not verify is an error, and a
 * cached copy is not used past its TTL or its exp.
 */
export class ApproversFetcher implements ApproversSource {
  private readonly url: string;
  private readonly send: typeof fetch;
  private readonly clock: () => number;
  private doc: Approvers | undefined;
  private fetchedAt = 0;
  private inflight: Promise<Approvers> | undefined;

  constructor(private readonly options: ApproversFetcherOptions) {
    const url = new URL(options.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`ApproversFetcher: url ${url.href} is not an http(s) URL`);
    if (!options.keys) throw new TypeError('ApproversFetcher: keys are required');
    this.url = url.href;
    this.send = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.clock = options.now ?? (() => Date.now() / 1000);
  }

  async approvers(): Promise<Approvers> {
    const now = this.clock();
    if (this.doc && now - this.fetchedAt < (this.options.ttlSeconds ?? 60) && now < this.doc.exp) return this.doc;
    this.inflight ??= this.fetchDocument(now).finally(() => {
      this.inflight = undefined;
    });
    return this.inflight;
  }

  private async fetchDocument(now: number): Promise<Approvers> {
    let text: string;
    try {
      const resp = await this.send(this.url, { headers: { Accept: 'application/jwt' }, signal: AbortSignal.timeout(this.options.timeoutMs ?? 10_000) });
      text = await resp.text();
      if (resp.status !== 200) throw new Error(`HTTP ${resp.status}`);
      if (text.length > MAX_APPROVERS_BYTES) throw new Error(`longer than ${MAX_APPROVERS_BYTES} bytes`);
    } catch (e) {
      throw new ReceiptError(ReceiptCodes.unavailable, `fetch approvers ${this.url}: ${(e as Error).message}`);
    }
    const doc = await parseApprovers(text, this.options.keys, { issuer: this.options.issuer, now });
    this.doc = doc;
    this.fetchedAt = now;
    return doc;
  }
}

async function checkHumans(c: ReceiptClaims, h: Humans, leeway: number): Promise<void> {
  if (!h.approvers) throw new ReceiptError(ReceiptCodes.unavailable, 'humans.approvers is required');
  const need = Math.max(1, h.min || 0, c.quorum?.required ?? 0);
  if (c.basis !== 'approval' || c.step_up !== 'passkey' || !c.signatures?.length) {
    throw new ReceiptError(ReceiptCodes.signaturesMissing, `the tool requires ${need} approver signature(s) and the receipt (basis ${c.basis}) carries none`);
  }
  const source = h.approvers;
  const doc = typeof (source as ApproversSource).approvers === 'function' ? await (source as ApproversSource).approvers() : (source as Approvers);
  const maxAge = h.maxAgeSeconds || 24 * 3600;
  const people: string[] = [];
  for (const [i, a] of c.signatures.entries()) {
    let person: string;
    try {
      person = await checkSignature(a ?? ({} as PasskeyAssertion), c, doc, h, maxAge, leeway);
    } catch (e) {
      throw new ReceiptError(ReceiptCodes.signatureInvalid, `signature ${i}: ${(e as Error).message}`);
    }
    if (!people.includes(person)) people.push(person);
  }
  if (people.length < need) {
    throw new ReceiptError(ReceiptCodes.signaturesMissing, `${people.length} distinct approver(s) signed (${people.join(', ')}); the tool requires ${need}`);
  }
}

/** Checks one assertion of c against doc and returns whose it is. */
async function checkSignature(a: PasskeyAssertion, c: ReceiptClaims, doc: Approvers, h: Humans, maxAge: number, leeway: number): Promise<string> {
  const id = new TextEncoder().encode(a.credential_id ?? '');
  const k = doc.approvers.find((k) => constantTimeEqual(new TextEncoder().encode(k.credential_id ?? ''), id));
  if (!k) throw new Error('by a passkey the approvers document does not list');
  if (k.revoked_at != null) throw new Error(`by ${k.person}'s passkey revoked at ${k.revoked_at}`);
  if (h.people?.length && !h.people.includes(k.person)) throw new Error(`by ${k.person}, whom this tool does not accept`);
  const assertion = { statement: a.statement ?? '', credential_id: a.credential_id ?? '', authenticator_data: a.authenticator_data ?? '', client_data_json: a.client_data_json ?? '', signature: a.signature ?? '' };
  const st = await verifyAssertion(assertion, k.public_key ?? ({} as JWK), { rp_id: doc.rp_id, origins: doc.origins });
  if (st.approver !== k.person) throw new Error(`the statement names ${st.approver}, the passkey is ${k.person}'s`);
  if (st.event_id !== (c.event_id ?? '') || st.tool !== c.tool) throw new Error(`the statement is for ${st.tool} on ${st.event_id}, the receipt for ${c.tool} on ${c.event_id ?? ''}`);
  if (st.decision !== 'approve' && st.decision !== 'edit') throw new Error(`the statement's decision is ${st.decision}`);
  if (effectiveSha256(st) !== c.args_sha256) throw new Error(`the statement approves arguments ${effectiveSha256(st)}, the receipt allows ${c.args_sha256}`);
  const t = statementTime(st);
  if (t > c.iat + CLOCK_SKEW_SECONDS + leeway) throw new Error(`the statement (${st.at}) is dated after the receipt was issued`);
  if (c.iat - t > maxAge + leeway) throw new Error(`the statement (${st.at}) is more than ${maxAge} s older than the receipt`);
  return k.person;
}

/** The parts of a Node request the middleware uses (node:http, Express, Fastify's raw request). */
export interface ReceiptRequest {
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  on(event: 'data', cb: (chunk: Uint8Array) => void): unknown;
  on(event: 'end', cb: () => void): unknown;
  on(event: 'error', cb: (err: Error) => void): unknown;
  countersignReceipt?: ReceiptClaims;
}

/** The parts of a Node response the middleware uses. */
export interface ReceiptResponse {
  statusCode: number;
  setHeader(name: string, value: string): unknown;
  end(body: string): unknown;
}

export interface ReceiptMiddlewareOptions extends VerifyReceiptOptions {
  /** The tool name receipts must carry, or a function of the request. */
  tool: string | ((req: ReceiptRequest) => string);
  /** The arguments about to run (default: the parsed JSON body; req.body when a body parser ran first). */
  arguments?: (req: ReceiptRequest) => unknown | Promise<unknown>;
  /** Told about every refusal. */
  onRefused?: (req: ReceiptRequest, err: ReceiptError) => void;
}

const MAX_BODY_BYTES = 1 << 20;

/**
 * A (req, res, next) middleware for node:http, Express and Connect-style
 * servers: next runs only for a request whose countersign-receipt header
 * holds a valid, unused receipt for this tool and exactly these arguments.
 * Other requests are answered with 401, 403 or 409 and
 * {"error":{"code","message"}}. The verified claims are req.countersignReceipt.
 */
export function receiptMiddleware(options: ReceiptMiddlewareOptions) {
  return (req: ReceiptRequest, res: ReceiptResponse, next: (err?: unknown) => void): void => {
    void (async () => {
      try {
        const raw = req.headers[RECEIPT_HEADER];
        const receipt = Array.isArray(raw) ? raw[0] : raw;
        if (!receipt) throw new ReceiptError(ReceiptCodes.missing, 'no receipt');
        const args = options.arguments ? await options.arguments(req) : await bodyOf(req);
        const tool = typeof options.tool === 'function' ? options.tool(req) : options.tool;
        req.countersignReceipt = await verifyReceipt(receipt, tool, args, options);
      } catch (e) {
        const err = e instanceof ReceiptError ? e : new ReceiptError(ReceiptCodes.unavailable, (e as Error).message);
        options.onRefused?.(req, err);
        res.statusCode = err.status;
        res.setHeader('content-type', 'application/json');
        res.setHeader('cache-control', 'no-store');
        res.end(JSON.stringify({ error: { code: err.code, message: err.message } }));
        return;
      }
      next();
    })();
  };
}

async function bodyOf(req: ReceiptRequest): Promise<unknown> {
  if (req.body !== undefined) return req.body;
  const chunks: Uint8Array[] = [];
  let size = 0;
  await new Promise<void>((resolve, reject) => {
    req.on('data', (c) => {
      size += c.length;
      if (size <= MAX_BODY_BYTES) chunks.push(c);
    });
    req.on('end', () => resolve());
    req.on('error', reject);
  });
  if (size > MAX_BODY_BYTES) throw new ReceiptError(ReceiptCodes.argumentsDiffer, `the body is larger than ${MAX_BODY_BYTES} bytes`);
  const bytes = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    bytes.set(c, off);
    off += c.length;
  }
  let parsed: unknown;
  try {
    parsed = parseStrict(new TextDecoder().decode(bytes) || '{}');
  } catch (e) {
    throw new ReceiptError(ReceiptCodes.argumentsDiffer, `the body is not JSON arguments: ${(e as Error).message}`);
  }
  req.body = parsed; // for the handler: the stream is consumed
  return parsed;
}
