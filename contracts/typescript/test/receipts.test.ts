import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { CompactSign, compactVerify, createLocalJWKSet, importJWK, jwtVerify } from 'jose';
import {
  canonicalize, localKeys, MemoryReplayStore, receiptMiddleware, ReceiptError, verifyReceipt, type ReceiptClaims,
} from '@countersign/client/receipts';

// The fixtures the Go and Python verifiers read too (contracts/testdata/receipts).
const fixtures = JSON.parse(readFileSync(new URL('../../../testdata/receipts/fixtures.json', import.meta.url), 'utf8'));

describe('shared receipt fixtures', () => {
  for (const c of fixtures.cases) {
    test(c.name, async () => {
      const replay = new MemoryReplayStore(() => c.now);
      let code = 'ok';
      let claims: ReceiptClaims | undefined;
      for (let i = 0; i < c.times; i++) {
        try {
          // A JSON.parse of the fixture file would round what arguments_text keeps exact.
          const args = c.arguments_text !== undefined ? new TextEncoder().encode(c.arguments_text) : c.arguments;
          claims = await verifyReceipt(c.receipt, c.tool, args, { keys: localKeys(fixtures.jwks), replay, issuer: fixtures.issuer, now: c.now, bases: c.bases });
          code = 'ok';
        } catch (e) {
          assert.ok(e instanceof ReceiptError, String(e));
          code = e.code;
        }
      }
      assert.equal(code, c.expect);
      if (c.claims) assert.deepEqual(claims, c.claims);
    });
  }
});

test('RFC 8785 vectors', () => {
  for (const v of fixtures.rfc8785) assert.equal(canonicalize(JSON.parse(v.input)), v.canonical, v.input);
});

test('RFC 8037 A.4 with jose: signing gives the RFC\'s JWS, which verifies', async () => {
  const r = fixtures.rfc8037;
  const priv = await importJWK(r.private_jwk, 'EdDSA');
  const jws = await new CompactSign(new TextEncoder().encode(r.payload)).setProtectedHeader({ alg: 'EdDSA' }).sign(priv);
  assert.equal(jws, r.compact);
  const { payload } = await compactVerify(r.compact, await importJWK(r.public_jwk, 'EdDSA'));
  assert.equal(new TextDecoder().decode(payload), r.payload);
});

test('jose\'s own JWT verification accepts the receipts Go signs, and refuses the forged ones', async () => {
  const keys = createLocalJWKSet(fixtures.jwks);
  const valid = fixtures.cases.find((c: { name: string }) => c.name === 'valid');
  const { payload, protectedHeader } = await jwtVerify(valid.receipt, keys, {
    typ: 'countersign-receipt+jwt', issuer: 'countersign', algorithms: ['EdDSA'], currentDate: new Date(valid.now * 1000),
  });
  assert.equal(protectedHeader.kid, 'fixture-2026-01');
  assert.equal(payload.tool, 'payments.send');
  assert.equal(payload.args_sha256, valid.claims.args_sha256);
  for (const name of ['claims changed after signing', 'signed by an unpublished or removed key', 'expired']) {
    const c = fixtures.cases.find((x: { name: string }) => x.name === name);
    await assert.rejects(jwtVerify(c.receipt, keys, { typ: 'countersign-receipt+jwt', currentDate: new Date(c.now * 1000) }), name);
  }
});

test('the middleware runs the handler once, for a valid receipt of the exact body', async () => {
  const valid = fixtures.cases.find((c: { name: string }) => c.name === 'valid');
  let ran = 0;
  const guard = receiptMiddleware({ tool: 'payments.send', keys: localKeys(fixtures.jwks), replay: new MemoryReplayStore(() => valid.now), now: valid.now });
  const server = http.createServer((req, res) => {
    guard(req, res, () => {
      ran++;
      res.end(JSON.stringify({ ok: true, body: (req as unknown as { body: unknown }).body }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/pay`;
  const post = async (receipt: string | undefined, body: string) => {
    const res = await fetch(url, { method: 'POST', body, headers: receipt ? { 'countersign-receipt': receipt } : {} });
    const json = (await res.json()) as { error?: { code: string } };
    return `${res.status} ${json.error?.code ?? 'ok'}`;
  };
  try {
    const body = JSON.stringify(valid.arguments);
    assert.equal(await post(undefined, body), '401 receipt_missing');
    assert.equal(await post(valid.receipt, body.replace('1250.5', '1250.6')), '403 receipt_arguments_differ');
    assert.equal(await post(valid.receipt, body), '200 ok');
    assert.equal(await post(valid.receipt, body), '409 receipt_replayed');
    assert.equal(ran, 1);
  } finally {
    server.close();
  }
});
