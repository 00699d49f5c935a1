import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { verifyWebhook, webhookReceiver, CountersignError, type Decided } from '@countersign/client';
import { Server, runId } from './harness.js';

// The official Standard Webhooks test vectors (libraries/go/webhook_test.go
// and libraries/rust/src/lib.rs of standard-webhooks/standard-webhooks).
const vectors = [
  {
    secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
    ts: 1614265330,
    body: '{"test": 2432232314}',
    sig: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
  },
  {
    secret: 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD',
    id: 'msg_27UH4WbU6Z5A5EzD8u03UvzRbpk',
    ts: 1649367553,
    body: '{"email":"test@example.com","username":"test_user"}',
    sig: 'v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=',
  },
];

const headersOf = (v: { id: string; ts: number; sig: string }) => ({
  'webhook-id': v.id,
  'webhook-timestamp': String(v.ts),
  'webhook-signature': v.sig,
});

describe('verifyWebhook', () => {
  for (const v of vectors) {
    test(`accepts the official vector ${v.id}`, async () => {
      const msg = await verifyWebhook(v.secret, headersOf(v), v.body, { now: v.ts * 1000 });
      assert.equal(msg.id, v.id);
      assert.equal(msg.timestamp, v.ts);
      assert.deepEqual(msg.payload, JSON.parse(v.body));
      // The same as bytes and with fetch's Headers.
      await verifyWebhook(v.secret, new Headers(headersOf(v)), new TextEncoder().encode(v.body), { now: v.ts * 1000 });
    });
  }

  const v = vectors[0]!;
  const rejects = (name: string, code: string, secret: string | string[], h: Record<string, string>, body: string, now = v.ts * 1000) =>
    test(name, async () => {
      await assert.rejects(verifyWebhook(secret, h, body, { now }), (err: unknown) => {
        assert.ok(err instanceof CountersignError);
        assert.equal(err.code, code);
        return true;
      });
    });

  rejects('refuses a wrong signature', 'webhook_no_matching_signature', v.secret,
    { ...headersOf(v), 'webhook-signature': 'v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=' }, v.body);
  rejects('refuses a partial signature', 'webhook_no_matching_signature', v.secret, { ...headersOf(v), 'webhook-signature': 'v1,' }, v.body);
  rejects('refuses the rust suite\'s must-fail signature', 'webhook_no_matching_signature', vectors[1]!.secret,
    { ...headersOf(vectors[1]!), 'webhook-signature': 'v1,R3PTzyfHASBKHH98a7yexTwaJ4yNIcGhFQc1yuN+BPU=' }, vectors[1]!.body, vectors[1]!.ts * 1000);
  rejects('refuses a changed body', 'webhook_no_matching_signature', v.secret, headersOf(v), '{"test": 2432232315}');
  rejects('refuses a changed id', 'webhook_no_matching_signature', v.secret, { ...headersOf(v), 'webhook-id': 'msg_other' }, v.body);
  rejects('refuses another secret', 'webhook_no_matching_signature', vectors[1]!.secret, headersOf(v), v.body);
  rejects('refuses an old timestamp', 'webhook_too_old', v.secret, headersOf(v), v.body, (v.ts + 301) * 1000);
  rejects('refuses a future timestamp', 'webhook_too_new', v.secret, headersOf(v), v.body, (v.ts - 301) * 1000);
  rejects('refuses a timestamp that is not unix seconds', 'webhook_bad_timestamp', v.secret, { ...headersOf(v), 'webhook-timestamp': '-1' }, v.body);
  rejects('refuses missing headers', 'webhook_missing_headers', v.secret, { 'webhook-id': v.id }, v.body);
  rejects('refuses a secret that is too short', 'webhook_invalid_secret', 'whsec_' + btoa('short'), headersOf(v), v.body);
  rejects('refuses an empty secret', 'webhook_invalid_secret', 'whsec_', headersOf(v), v.body);

  test('accepts during a rotation: any signature under any secret', async () => {
    const h = { ...headersOf(v), 'webhook-signature': `v1a,ignored v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= ${v.sig}` };
    await verifyWebhook([vectors[1]!.secret, v.secret], h, v.body, { now: v.ts * 1000 });
  });
});

describe('webhooks from a real server', () => {
  test('the receiver verifies Countersign\'s webhooks and hands each outcome to the resume callback once', async () => {
    const secret = 'whsec_' + randomBytes(32).toString('base64');
    const decided: Decided[] = [];
    const requested: string[] = [];
    let resolveDecided!: () => void;
    const gotDecided = new Promise<void>((r) => (resolveDecided = r));
    const receiver = webhookReceiver({
      secret,
      onRequested: (req) => void requested.push(req.event_id),
      onDecided: (d) => {
        decided.push(d);
        resolveDecided();
      },
    });
    const statuses: number[] = [];
    const hook = http.createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const out = await receiver.handle(req.headers, new Uint8Array(Buffer.concat(chunks)));
      statuses.push(out.status);
      res.writeHead(out.status).end();
    });
    await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
    const hookURL = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/countersign`;
    const server = await Server.start({
      config: `notify:\n  webhooks:\n    - {name: agent, url: "${hookURL}", secrets: [env:TS_TEST_WEBHOOK_SECRET]}\n`,
      policy: `version: "ts-webhook-1"\ndefault: require_approval\nrules:\n  - name: payments\n    tools: ["payments.*"]\n    action: require_approval\n    channels: ["webhook:agent"]\n`,
      env: { TS_TEST_WEBHOOK_SECRET: secret },
    });
    try {
      const cs = server.agentClient();
      const run = { id: runId(), requested_by: 'carol' };
      const call = { id: 'pay-1', name: 'payments.send', arguments: { amount: 5, recipient: 'ACME' } };
      const [r] = await cs.review(run, [call]);
      await server.alice().decide(r!.event_id!, { decision: 'approve' });
      await gotDecided;
      assert.equal(decided.length, 1);
      assert.equal(decided[0]!.event_id, r!.event_id);
      assert.equal(decided[0]!.status, 'approved');
      assert.equal(decided[0]!.run_id, run.id);
      // The callback resumes the run: the call runs, once.
      let ran = 0;
      const out = await cs.run(run, call, () => ran++);
      assert.equal(out.result.verdict, 'allowed');
      assert.equal(ran, 1);
      assert.ok(statuses.every((s) => s === 200), `statuses ${statuses}`);
      // A redelivery of the same webhook-id is dropped.
      const body = JSON.stringify(decided[0]);
      const ts = Math.floor(Date.now() / 1000);
      const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
      const { createHmac } = await import('node:crypto');
      const sig = 'v1,' + createHmac('sha256', key).update(`msg_again.${ts}.${body}`).digest('base64');
      const h = { 'webhook-id': 'msg_again', 'webhook-timestamp': String(ts), 'webhook-signature': sig };
      assert.equal((await receiver.handle(h, body)).status, 200);
      assert.equal((await receiver.handle(h, body)).status, 200);
      assert.equal(decided.length, 2, 'one more outcome for the new webhook-id, none for its redelivery');
      // A forged delivery is refused.
      const forged = await receiver.fetch(new Request(hookURL, { method: 'POST', headers: { ...h, 'webhook-id': 'msg_forged' }, body }));
      assert.equal(forged.status, 401);
      assert.equal((await forged.json()).error.code, 'webhook_no_matching_signature');
    } finally {
      await server.stop();
      hook.closeAllConnections();
      await new Promise((r) => hook.close(r));
    }
  });
});
