// Receipts the approvers signed with their passkeys (verifyReceipt's
// humans option): the shared cases the Go and Python verifiers check too
// (contracts/testdata/receipts/humans.json), assertions a software
// authenticator makes here, the approvers document's fetcher against a
// local HTTP server, and the middleware.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { CompactSign, importJWK } from 'jose';
import {
  APPROVERS_TYPE, ApproversFetcher, inspectReceipt, localKeys, MemoryReplayStore, parseApprovers, receiptMiddleware, ReceiptError,
  verifyReceipt, type Approvers, type Humans, type PasskeyAssertion, type ReceiptClaims,
} from '@countersign/client/receipts';

const f = JSON.parse(readFileSync(new URL('../../../testdata/receipts/humans.json', import.meta.url), 'utf8'));
const keys = localKeys(f.jwks);
const valid = f.cases.find((c: { name: string }) => c.name === 'alice (ES256) and bob (EdDSA) signed');
const serverOnly = f.cases.find((c: { name: string }) => c.name === "the server's key alone, no step-up");

let lastMessage = '';

async function codeOf(p: Promise<unknown>): Promise<string> {
  lastMessage = '';
  try {
    await p;
    return 'ok';
  } catch (e) {
    assert.ok(e instanceof ReceiptError, String(e));
    lastMessage = e.message;
    return e.code;
  }
}

describe('shared cases of receipts the approvers signed', () => {
  for (const c of f.cases) {
    test(c.name, async () => {
      const doc = await parseApprovers(f.approvers, keys, { issuer: f.issuer, now: c.now });
      const humans: Humans = { min: c.min, people: c.people, approvers: doc };
      const code = await codeOf(verifyReceipt(c.receipt, c.tool, c.arguments, { keys, issuer: f.issuer, now: c.now, replay: new MemoryReplayStore(() => c.now), humans }));
      assert.equal(code, c.expect);
    });
  }
});

test('the approvers document is not a receipt, nor a receipt the approvers document; an expired one is refused', async () => {
  assert.equal(await codeOf(inspectReceipt(f.approvers, { keys, now: valid.now })), 'receipt_malformed');
  assert.equal(await codeOf(parseApprovers(valid.receipt, keys, { now: valid.now })), 'receipt_malformed');
  const doc = await parseApprovers(f.approvers, keys, { now: valid.now });
  assert.equal(await codeOf(parseApprovers(f.approvers, keys, { now: doc.exp })), 'receipt_expired');
  assert.equal(await codeOf(parseApprovers(f.approvers, keys, { now: valid.now, issuer: 'another' })), 'receipt_wrong_issuer');
  assert.equal(await codeOf(parseApprovers(f.approvers, localKeys({ keys: [] }), { now: valid.now })), 'receipt_unknown_key');
  const [h, p, s] = f.approvers.split('.');
  const flipped = s.slice(0, 10) + (s[10] === 'A' ? 'B' : 'A') + s.slice(11);
  assert.equal(await codeOf(parseApprovers(`${h}.${p}.${flipped}`, keys, { now: valid.now })), 'receipt_bad_signature');
});

// A software authenticator for the fixtures' passkeys: their keys derive
// from seeds, as contracts/passkey/passkeytest makes them.
const sha = (s: string | Uint8Array) => createHash('sha256').update(s).digest();
const b64 = (b: Uint8Array) => Buffer.from(b).toString('base64url');
const payloadOf = (tok: string) => JSON.parse(Buffer.from(tok.split('.')[1]!, 'base64url').toString()) as ReceiptClaims & Record<string, unknown>;
const approversDoc = JSON.parse(Buffer.from(f.approvers.split('.')[1], 'base64url').toString()) as Approvers;
const keyOf = (person: string, kty: string) => approversDoc.approvers.find((k) => k.person === person && k.public_key.kty === kty)!;

async function serverSign(claims: object): Promise<string> {
  const jwk = { kty: 'OKP', crv: 'Ed25519', x: f.jwks.keys[0].x, d: b64(sha('countersign receipt fixture key 2026-01')) };
  return new CompactSign(new TextEncoder().encode(JSON.stringify(claims)))
    .setProtectedHeader({ alg: 'EdDSA', typ: 'countersign-receipt+jwt', kid: f.jwks.keys[0].kid })
    .sign(await importJWK(jwk, 'EdDSA'));
}

interface Make {
  statement?: Record<string, string>;
  statementText?: string;
  clientData?: string;
  flags?: number;
  rpId?: string;
  mangle?: (a: PasskeyAssertion) => void;
  highS?: boolean;
}

const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;
const claims0 = payloadOf(valid.receipt);

function statementFor(who: string, over: Record<string, string> = {}): Record<string, string> {
  return {
    approver: who, arguments_sha256: claims0.args_sha256, at: '2025-12-31T23:58:00Z', decision: 'approve',
    event_id: claims0.event_id!, spec: 'countersign.statement/v1', tool: claims0.tool, ...over,
  };
}

function canonical(st: Record<string, string>): string {
  return '{' + Object.keys(st).sort().map((k) => JSON.stringify(k) + ':' + JSON.stringify(st[k])).join(',') + '}';
}

function der(raw: Uint8Array): Uint8Array {
  const int = (b: Uint8Array) => {
    let i = 0;
    while (i < b.length - 1 && b[i] === 0) i++;
    const v = b.subarray(i);
    return v[0]! & 0x80 ? [0x02, v.length + 1, 0, ...v] : [0x02, v.length, ...v];
  };
  const body = [...int(raw.subarray(0, 32)), ...int(raw.subarray(32))];
  return Uint8Array.from([0x30, body.length, ...body]);
}

async function assertion(who: 'alice' | 'bob', m: Make = {}): Promise<PasskeyAssertion> {
  const k = keyOf(who, who === 'alice' ? 'EC' : 'OKP');
  const text = m.statementText ?? canonical(m.statement ?? statementFor(who));
  const client = m.clientData ?? JSON.stringify({ type: 'webauthn.get', challenge: b64(sha(text)), origin: 'https://inbox.example.com', crossOrigin: false });
  const auth = Buffer.concat([sha(m.rpId ?? approversDoc.rp_id), Buffer.from([m.flags ?? 0x05, 0, 0, 0, 7])]);
  const signed = Buffer.concat([auth, sha(client)]);
  let sig: Uint8Array;
  if (who === 'alice') {
    const jwk = { kty: 'EC', crv: 'P-256', x: k.public_key.x, y: k.public_key.y, d: b64(sha('es256 alice')) };
    const priv = await crypto.subtle.importKey('jwk', jwk, { name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign']);
    const raw = new Uint8Array(await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, priv, signed));
    if (m.highS) {
      const s = P256_N - BigInt('0x' + Buffer.from(raw.subarray(32)).toString('hex'));
      raw.set(Buffer.from(s.toString(16).padStart(64, '0'), 'hex'), 32);
    }
    sig = der(raw);
  } else {
    const jwk = { kty: 'OKP', crv: 'Ed25519', x: k.public_key.x, d: b64(sha('eddsa bob')) };
    const priv = await crypto.subtle.importKey('jwk', jwk, { name: 'Ed25519' }, false, ['sign']);
    sig = new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, priv, signed));
  }
  const a = { statement: text, credential_id: k.credential_id, authenticator_data: b64(auth), client_data_json: b64(Buffer.from(client)), signature: b64(sig) };
  m.mangle?.(a);
  return a;
}

async function verifyWith(alice: PasskeyAssertion, bob: PasskeyAssertion): Promise<string> {
  const tok = await serverSign({ ...claims0, signatures: [alice, bob] });
  const doc = await parseApprovers(f.approvers, keys, { now: valid.now });
  return codeOf(verifyReceipt(tok, valid.tool, valid.arguments, { keys, now: valid.now, replay: new MemoryReplayStore(() => valid.now), humans: { min: 2, approvers: doc } }));
}

const flipByte = (s: string, i: number) => {
  const b = Buffer.from(s, 'base64url');
  b[i]! ^= 0x01;
  return b64(b);
};

describe('assertions made here', () => {
  test('a fresh assertion by each passkey passes', async () => {
    assert.equal(await verifyWith(await assertion('alice'), await assertion('bob')), 'ok');
  });
  test('an ES256 signature with a high s passes, as in Go (ECDSA does not fix s)', async () => {
    assert.equal(await verifyWith(await assertion('alice', { highS: true }), await assertion('bob')), 'ok');
  });
  const bad: [string, string, () => Promise<[PasskeyAssertion, PasskeyAssertion]>][] = [
    ['ES256: authenticator data changed after signing', 'signature 0: the signature does not verify', async () => [await assertion('alice', { mangle: (a) => (a.authenticator_data = flipByte(a.authenticator_data, 36)) }), await assertion('bob')]],
    ['EdDSA: authenticator data changed after signing', 'signature 1: the signature does not verify', async () => [await assertion('alice'), await assertion('bob', { mangle: (a) => (a.authenticator_data = flipByte(a.authenticator_data, 36)) })]],
    ['ES256: the signature changed', 'signature 0: the signature does not verify', async () => [await assertion('alice', { mangle: (a) => (a.signature = flipByte(a.signature, 10)) }), await assertion('bob')]],
    ['ES256: DER with a trailing byte', 'signature 0: the signature does not verify', async () => [await assertion('alice', { mangle: (a) => (a.signature = b64(Buffer.concat([Buffer.from(a.signature, 'base64url'), Buffer.from([0])]))) }), await assertion('bob')]],
    ['EdDSA: the signature changed', 'signature 1: the signature does not verify', async () => [await assertion('alice'), await assertion('bob', { mangle: (a) => (a.signature = flipByte(a.signature, 40)) })]],
    ['client data naming a key twice', 'duplicate key', async () => {
      const text = canonical(statementFor('bob'));
      const client = `{"type":"webauthn.create","type":"webauthn.get","challenge":"${b64(sha(text))}","origin":"https://inbox.example.com"}`;
      return [await assertion('alice'), await assertion('bob', { clientData: client })];
    }],
    ['client data of type webauthn.create', 'want webauthn.get', async () => {
      const text = canonical(statementFor('bob'));
      return [await assertion('alice'), await assertion('bob', { clientData: JSON.stringify({ type: 'webauthn.create', challenge: b64(sha(text)), origin: 'https://inbox.example.com' }) })];
    }],
    ['an assertion in a cross-origin frame', 'cross-origin', async () => {
      const text = canonical(statementFor('bob'));
      return [await assertion('alice'), await assertion('bob', { clientData: JSON.stringify({ type: 'webauthn.get', challenge: b64(sha(text)), origin: 'https://inbox.example.com', crossOrigin: true }) })];
    }],
    ['a statement not in canonical form', 'not in canonical form', async () => [await assertion('alice'), await assertion('bob', { statementText: JSON.stringify(statementFor('bob'), null, 1) })]],
    ['a statement with a field of another name', 'unknown field', async () => [await assertion('alice'), await assertion('bob', { statement: { ...statementFor('bob'), note: 'x' } })]],
    ['the user present but not verified', 'did not verify the user', async () => [await assertion('alice', { flags: 0x01 }), await assertion('bob')]],
    ['the user verified but not present', 'did not verify the user', async () => [await assertion('alice', { flags: 0x04 }), await assertion('bob')]],
    ['an assertion for another relying party', 'another relying party', async () => [await assertion('alice', { rpId: 'evil.example' }), await assertion('bob')]],
    ['a statement dated a minute after the receipt', 'dated after the receipt', async () => [await assertion('alice'), await assertion('bob', { statement: statementFor('bob', { at: '2026-01-01T00:01:00Z' }) })]],
    ['a statement dated on a day that does not exist', 'is not YYYY-MM-DDTHH:MM:SSZ', async () => [await assertion('alice'), await assertion('bob', { statement: statementFor('bob', { at: '2025-11-31T23:58:00Z' }) })]],
  ];
  for (const [name, why, make] of bad) {
    test(name, async () => {
      const [a, b] = await make();
      assert.equal(await verifyWith(a, b), 'receipt_signature_invalid');
      assert.ok(lastMessage.includes(why), lastMessage);
    });
  }
  test('a statement dated 30 s after the receipt passes', async () => {
    assert.equal(await verifyWith(await assertion('alice'), await assertion('bob', { statement: statementFor('bob', { at: '2026-01-01T00:00:30Z' }) })), 'ok');
  });
  test('signatures on a policy receipt are malformed', async () => {
    const tok = await serverSign({ ...claims0, basis: 'policy', signatures: [await assertion('alice')] });
    assert.equal(await codeOf(inspectReceipt(tok, { keys, now: valid.now })), 'receipt_malformed');
  });
});

/** A server of the approvers document that counts its requests. */
async function documentServer(body: () => string) {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    assert.equal(req.headers.accept, 'application/jwt');
    res.setHeader('content-type', 'application/jwt');
    res.end(body());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/countersign-approvers`;
  const close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return { url, requests: () => requests, close };
}

describe('ApproversFetcher', () => {
  test('fetches, verifies and caches the document for its TTL, and fails closed when the server is down', async () => {
    const srv = await documentServer(() => f.approvers);
    let now = valid.now;
    const fetcher = new ApproversFetcher({ url: srv.url, keys, ttlSeconds: 60, now: () => now });
    const verify = (c: typeof valid) => codeOf(verifyReceipt(c.receipt, c.tool, c.arguments, { keys, now, replay: new MemoryReplayStore(() => now), humans: { min: 1, approvers: fetcher } }));
    try {
      assert.equal(await verify(valid), 'ok');
      assert.equal(await verify(serverOnly), 'receipt_signatures_missing');
      const [a, b] = await Promise.all([fetcher.approvers(), fetcher.approvers()]);
      assert.equal(a, b);
      assert.equal(srv.requests(), 1, 'one fetch within the TTL');
      now += 61;
      assert.equal(await verify(valid), 'ok');
      assert.equal(srv.requests(), 2, 'fetched again after the TTL');
    } finally {
      await srv.close();
    }
    now += 61;
    assert.equal(await verify(valid), 'receipt_unavailable', 'a server that is down past the TTL: no stale copy');
  });

  test('a server that serves a receipt, an error or nothing is refused', async () => {
    let body = valid.receipt;
    const srv = await documentServer(() => body);
    try {
      const fetcher = new ApproversFetcher({ url: srv.url, keys, now: () => valid.now });
      assert.equal(await codeOf(fetcher.approvers()), 'receipt_malformed');
      body = '';
      assert.equal(await codeOf(fetcher.approvers()), 'receipt_malformed');
    } finally {
      await srv.close();
    }
    const down = new ApproversFetcher({ url: srv.url, keys, now: () => valid.now, timeoutMs: 2000 });
    assert.equal(await codeOf(down.approvers()), 'receipt_unavailable');
    const notFound = http.createServer((_req, res) => {
      res.statusCode = 404;
      res.end(f.approvers);
    });
    await new Promise<void>((resolve) => notFound.listen(0, '127.0.0.1', resolve));
    try {
      const fetcher = new ApproversFetcher({ url: `http://127.0.0.1:${(notFound.address() as AddressInfo).port}/`, keys, now: () => valid.now });
      assert.equal(await codeOf(fetcher.approvers()), 'receipt_unavailable');
    } finally {
      notFound.close();
    }
  });
});

test('the middleware runs the handler only for a receipt the approvers signed', async () => {
  const doc = await parseApprovers(f.approvers, keys, { now: valid.now });
  let ran = 0;
  const guard = receiptMiddleware({ tool: 'payments.send', keys, now: valid.now, replay: new MemoryReplayStore(() => valid.now), humans: { min: 2, approvers: doc } });
  const server = http.createServer((req, res) => guard(req, res, () => {
    ran++;
    res.end('{}');
  }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  const post = async (receipt: string) => {
    const res = await fetch(url, { method: 'POST', body: JSON.stringify(valid.arguments), headers: { 'countersign-receipt': receipt } });
    const json = (await res.json()) as { error?: { code: string } };
    return `${res.status} ${json.error?.code ?? 'ok'}`;
  };
  try {
    assert.equal(await post(serverOnly.receipt), '403 receipt_signatures_missing');
    assert.equal(await post(valid.receipt), '200 ok');
    assert.equal(ran, 1);
  } finally {
    server.close();
  }
  assert.equal(APPROVERS_TYPE, 'countersign-approvers+jwt');
});

test("the README's example of humans imports what the package exports", async () => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const block = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes('humans:'));
  assert.ok(block, 'the README shows humans');
  const names = /import \{([^}]*)\} from '@countersign\/client\/receipts'/.exec(block)![1]!.split(',').map((n) => n.trim());
  const mod = (await import('@countersign/client/receipts')) as Record<string, unknown>;
  for (const n of names) assert.equal(typeof mod[n], 'function', n);
  assert.ok(block.split('\n').length <= 11, 'a short example');
});
