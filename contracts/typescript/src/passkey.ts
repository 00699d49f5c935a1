/**
 * The approval statement an approver signs with a passkey, and the check of
 * its WebAuthn assertion (as contracts/passkey does in Go). Signatures are
 * verified with Web Crypto: ECDSA P-256 with SHA-256 (ES256) and Ed25519
 * (EdDSA).
 */
import { parseStrict } from './strict-json.js';

/** Bytes on an ArrayBuffer, as Web Crypto takes them. */
type Bytes = Uint8Array<ArrayBuffer>;

/** A WebAuthn assertion over an approval statement, as a receipt's `signatures` carry it (base64url without padding). */
export interface PasskeyAssertion {
  /** The approval statement's canonical JSON (RFC 8785); the assertion's challenge is its SHA-256. */
  statement: string;
  credential_id: string;
  authenticator_data: string;
  client_data_json: string;
  signature: string;
}

/** A passkey's public key as a JWK: EC P-256 (ES256) or OKP Ed25519 (EdDSA). */
export interface JWK {
  kty: string;
  crv: string;
  alg?: string;
  x: string;
  y?: string;
}

/** The WebAuthn relying party a passkey is bound to: its RP ID and the origins of the inbox. */
export interface PasskeyParty {
  rp_id: string;
  origins: string[];
}

/** What an approver signs: exactly one decision on exactly one call. Every field is a string. */
export interface Statement {
  spec: string;
  event_id: string;
  approver: string;
  tool: string;
  /** The hash of the arguments under review when the approver decided. */
  arguments_sha256: string;
  decision: string;
  /** The hash of the approver's own edit, if any. */
  edited_arguments_sha256?: string;
  /** When the statement was made: RFC 3339, UTC, to the second. */
  at: string;
}

export const STATEMENT_SPEC = 'countersign.statement/v1';

/** How far after a receipt's iat a statement's time may be, in seconds. */
export const CLOCK_SKEW_SECONDS = 30;

const STATEMENT_FIELDS = new Set(['spec', 'event_id', 'approver', 'tool', 'arguments_sha256', 'decision', 'edited_arguments_sha256', 'at']);
const REQUIRED_FIELDS = ['event_id', 'approver', 'tool', 'arguments_sha256', 'decision', 'at'] as const;

/**
 * Reads a statement in its canonical form, strictly: unknown fields,
 * missing fields, a value that is not a string, another spec or a text
 * that is not the statement's canonical JSON are errors.
 */
export function parseStatement(text: string): Statement {
  let v: unknown;
  try {
    v = parseStrict(text, { safeIntegers: false });
  } catch (e) {
    throw new Error(`statement: ${(e as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('statement: not a JSON object');
  const obj = v as Record<string, unknown>;
  for (const [k, val] of Object.entries(obj)) {
    if (!STATEMENT_FIELDS.has(k)) throw new Error(`statement: unknown field ${JSON.stringify(k)}`);
    if (typeof val !== 'string') throw new Error(`statement: ${k} is not a string`);
  }
  const st = obj as unknown as Statement;
  if (st.spec !== STATEMENT_SPEC) throw new Error(`statement: spec ${JSON.stringify(st.spec)}, want ${STATEMENT_SPEC}`);
  for (const f of REQUIRED_FIELDS) if (!st[f]) throw new Error(`statement: ${f} is required`);
  if (Number.isNaN(statementTime(st))) throw new Error(`statement: at ${JSON.stringify(st.at)} is not YYYY-MM-DDTHH:MM:SSZ`);
  if (canonicalStatement(st) !== text) throw new Error('statement: not in canonical form (RFC 8785)');
  return st;
}

/** The statement's canonical JSON: keys sorted, compact, an empty edited_arguments_sha256 left out. */
function canonicalStatement(st: Statement): string {
  const keys = Object.keys(st).filter((k) => !(k === 'edited_arguments_sha256' && st[k] === '')).sort();
  const rec = st as unknown as Record<string, string>;
  return '{' + keys.map((k) => JSON.stringify(k) + ':' + JSON.stringify(rec[k])).join(',') + '}';
}

/** The statement's time in unix seconds (NaN when `at` is not a valid time of the layout). */
export function statementTime(st: Statement): number {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z$/.exec(st.at);
  if (!m) return NaN;
  const [y, mo, d, h, mi, s] = m.slice(1).map(Number) as [number, number, number, number, number, number];
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59) return NaN;
  const ms = Date.UTC(y, mo - 1, d, h, mi, s);
  if (new Date(ms).getUTCDate() !== d) return NaN; // a day the month does not have
  return ms / 1000;
}

/** The hash of the arguments the statement approves to run: the edit's, or else those under review. */
export function effectiveSha256(st: Statement): string {
  return st.edited_arguments_sha256 || st.arguments_sha256;
}

/**
 * Checks that `a` is a valid WebAuthn assertion, by the passkey whose
 * public key is `key`, bound to `party`, over the statement it carries, and
 * returns that statement. The checks: the statement is canonical; the
 * client data (no key named twice) is of type webauthn.get, its challenge
 * is the statement's SHA-256, its origin one of party's and not
 * cross-origin; the authenticator data is for party's RP ID with the user
 * present and verified; the signature over the authenticator data and the
 * client data's hash verifies with key. What the statement says, and when,
 * is the caller's to check. Throws an Error saying what failed.
 */
export async function verifyAssertion(a: PasskeyAssertion, key: JWK, party: PasskeyParty): Promise<Statement> {
  const st = parseStatement(a.statement);
  const pub = await importPublicKey(key);
  let auth: Bytes, client: Bytes, sig: Bytes;
  try {
    auth = decodeB64url(a.authenticator_data);
    client = decodeB64url(a.client_data_json);
    sig = decodeB64url(a.signature);
  } catch {
    throw new Error('authenticator_data, client_data_json and signature must be base64url');
  }
  await checkClientData(client, a.statement, party);
  await checkAuthenticatorData(auth, party.rp_id);
  const clientHash = await sha256(client);
  const signed = new Uint8Array(auth.length + clientHash.length);
  signed.set(auth);
  signed.set(clientHash, auth.length);
  if (!(await verifySignature(pub, signed, sig))) throw new Error("the signature does not verify with the passkey's public key");
  return st;
}

async function checkClientData(data: Bytes, statement: string, party: PasskeyParty): Promise<void> {
  let cd: unknown;
  try {
    cd = parseStrict(new TextDecoder('utf-8', { fatal: true }).decode(data), { safeIntegers: false });
  } catch (e) {
    throw new Error(`client data: ${(e as Error).message}`);
  }
  if (typeof cd !== 'object' || cd === null || Array.isArray(cd)) throw new Error('client data is not a JSON object');
  const c = cd as Record<string, unknown>;
  for (const f of ['type', 'challenge', 'origin'] as const) {
    if (c[f] !== undefined && c[f] !== null && typeof c[f] !== 'string') throw new Error(`client data: ${f} is not a string`);
  }
  if (c.crossOrigin !== undefined && c.crossOrigin !== null && typeof c.crossOrigin !== 'boolean') throw new Error('client data: crossOrigin is not a boolean');
  if (c.type !== 'webauthn.get') throw new Error(`client data type ${JSON.stringify(c.type)}, want webauthn.get`);
  const want = await sha256(new TextEncoder().encode(statement));
  let got: Bytes;
  try {
    got = decodeB64url(typeof c.challenge === 'string' ? c.challenge : '');
  } catch {
    got = new Uint8Array();
  }
  if (!constantTimeEqual(got, want)) throw new Error("the assertion's challenge is not the SHA-256 of the statement it carries");
  if (typeof c.origin !== 'string' || !party.origins.includes(c.origin)) throw new Error(`origin ${JSON.stringify(c.origin)} is not one of the inbox's`);
  if (c.crossOrigin === true) throw new Error('the assertion was made in a cross-origin frame');
}

async function checkAuthenticatorData(auth: Bytes, rpId: string): Promise<void> {
  if (auth.length < 37) throw new Error(`authenticator data is ${auth.length} bytes, at least 37 expected`);
  const want = await sha256(new TextEncoder().encode(rpId));
  if (!constantTimeEqual(auth.subarray(0, 32), want)) throw new Error(`the assertion is for another relying party than ${JSON.stringify(rpId)}`);
  const flags = auth[32]!;
  if ((flags & 0x01) === 0 || (flags & 0x04) === 0) throw new Error(`the authenticator did not verify the user (flags 0x${flags.toString(16).padStart(2, '0')})`);
}

// P-256 (FIPS 186-4 D.1.2.3): y² = x³ − 3x + b over GF(p), of order n.
const P256_P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const P256_B = 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn;
const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;

type PublicKey = { alg: 'ES256' | 'EdDSA'; key: CryptoKey };

/** Imports a passkey's JWK: EC P-256 (ES256) or OKP Ed25519 (EdDSA). A point off the curve is an error. */
async function importPublicKey(k: JWK): Promise<PublicKey> {
  const alg = k.alg ?? '';
  if (k.kty === 'EC' && k.crv === 'P-256' && (alg === '' || alg === 'ES256')) {
    let x: Bytes, y: Bytes;
    try {
      x = decodeB64url(k.x);
      y = decodeB64url(k.y ?? '');
    } catch {
      throw new Error('public key: x and y must be 32 bytes of base64url');
    }
    if (x.length !== 32 || y.length !== 32) throw new Error('public key: x and y must be 32 bytes of base64url');
    const xi = toBigInt(x);
    const yi = toBigInt(y);
    if (xi >= P256_P || yi >= P256_P || (yi * yi - (xi * xi * xi - 3n * xi + P256_B)) % P256_P !== 0n) {
      throw new Error('public key: the point is not on the P-256 curve');
    }
    const key = await crypto.subtle.importKey('jwk', { kty: 'EC', crv: 'P-256', x: k.x, y: k.y }, { name: 'ECDSA', namedCurve: 'P-256' }, false, ['verify']);
    return { alg: 'ES256', key };
  }
  if (k.kty === 'OKP' && k.crv === 'Ed25519' && (alg === '' || alg === 'EdDSA')) {
    let x: Bytes;
    try {
      x = decodeB64url(k.x);
    } catch {
      x = new Uint8Array();
    }
    if (x.length !== 32 || (k.y !== undefined && k.y !== '')) throw new Error('public key: x must be 32 bytes of base64url');
    const key = await crypto.subtle.importKey('raw', x, { name: 'Ed25519' }, false, ['verify']);
    return { alg: 'EdDSA', key };
  }
  throw new Error(`public key: kty ${JSON.stringify(k.kty)} crv ${JSON.stringify(k.crv)} alg ${JSON.stringify(alg)} is not ES256 (EC P-256) or EdDSA (OKP Ed25519)`);
}

async function verifySignature(pub: PublicKey, signed: Bytes, sig: Bytes): Promise<boolean> {
  try {
    if (pub.alg === 'ES256') {
      const raw = derToRaw(sig);
      return raw !== null && (await crypto.subtle.verify({ name: 'ECDSA', hash: 'SHA-256' }, pub.key, raw, signed));
    }
    return sig.length === 64 && (await crypto.subtle.verify({ name: 'Ed25519' }, pub.key, sig, signed));
  } catch {
    return false;
  }
}

/**
 * The r‖s form (64 bytes) of an ASN.1 DER ECDSA signature
 * (SEQUENCE { INTEGER r, INTEGER s }), or null when it is not strict DER or
 * r or s is not in [1, n−1].
 */
export function derToRaw(der: Bytes): Bytes | null {
  if (der.length < 8 || der[0] !== 0x30 || der[1] !== der.length - 2) return null; // short-form length, no trailing bytes
  const out = new Uint8Array(64);
  let off = 2;
  for (let i = 0; i < 2; i++) {
    if (der[off] !== 0x02) return null;
    const len = der[off + 1]!;
    if (len === 0 || len >= 0x80 || off + 2 + len > der.length) return null;
    const int = der.subarray(off + 2, off + 2 + len);
    if (int[0]! & 0x80) return null; // negative
    if (int[0] === 0 && (len === 1 || (int[1]! & 0x80) === 0)) return null; // zero or not minimal
    const v = toBigInt(int);
    if (v < 1n || v >= P256_N) return null;
    const bytes = int[0] === 0 ? int.subarray(1) : int;
    out.set(bytes, i * 32 + 32 - bytes.length);
    off += 2 + len;
  }
  return off === der.length ? out : null;
}

function toBigInt(b: Bytes): bigint {
  let v = 0n;
  for (const byte of b) v = (v << 8n) | BigInt(byte);
  return v;
}

async function sha256(data: Bytes): Promise<Bytes> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', data));
}

/** Compares two byte strings in time that depends on their lengths only. */
export function constantTimeEqual(a: Bytes, b: Bytes): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** Strict base64url without padding: the canonical encoding of some non-empty bytes. */
export function decodeB64url(s: string): Bytes {
  if (!s || !/^[A-Za-z0-9_-]*$/.test(s) || s.length % 4 === 1) throw new Error('not base64url');
  const bin = atob(s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4));
  const out = Uint8Array.from(bin, (ch) => ch.charCodeAt(0));
  if (encodeB64url(out) !== s) throw new Error('not canonical base64url');
  return out;
}

export function encodeB64url(b: Bytes): string {
  let bin = '';
  for (const byte of b) bin += String.fromCharCode(byte);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}
