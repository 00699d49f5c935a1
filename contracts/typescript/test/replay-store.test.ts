// Receipts stay single use across a tool's replicas and restarts: each
// replica verifies with a serverReplayStore of the same Countersign, which
// records every use (POST /v1/receipts/use) in the server.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { receiptHeaders } from '@countersign/client';
import { MemoryReplayStore, receiptMiddleware, remoteKeys, serverReplayStore, type ReplayStore } from '@countersign/client/receipts';
import { Server, runId } from './harness.js';

let server: Server;
const replicas: http.Server[] = [];
before(async () => {
  server = await Server.start();
});
after(async () => {
  await Promise.all(replicas.map((r) => new Promise<void>((resolve) => r.close(() => resolve()))));
  await server?.stop();
});

const payment = { amount: 1250, currency: 'EUR', recipient: 'Globex GmbH' };

/** One replica of the payment tool, verifying with its own store; answers its post function. */
async function replica(replay: ReplayStore, ran: unknown[]): Promise<(receipt: string) => Promise<string>> {
  const guard = receiptMiddleware({ tool: 'payments_send', keys: remoteKeys(new URL('/.well-known/jwks.json', server.url)), replay });
  const srv = http.createServer((req, res) =>
    guard(req, res, () => {
      ran.push((req as unknown as { body: unknown }).body);
      res.end(JSON.stringify({ paid: true }));
    }),
  );
  replicas.push(srv);
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/pay`;
  return async (receipt) => {
    const res = await fetch(url, { method: 'POST', body: JSON.stringify(payment), headers: receiptHeaders(receipt) });
    const body = (await res.json()) as { error?: { code: string } };
    return `${res.status} ${body.error?.code ?? 'ok'}`;
  };
}

/** A receipt of an approved payments_send call, as cs.run hands it to the tool function. */
async function approvedReceipt(): Promise<string> {
  const cs = server.agentClient();
  const run = { id: runId('replay'), requested_by: 'carol' };
  const running = cs.run(run, { id: 'pay-1', name: 'payments_send', arguments: payment }, (_args, context) => context.receipt);
  const request = await server.requestFor(run.id, 'pay-1');
  await server.alice().decide(request.event_id, { decision: 'approve' });
  const out = await running;
  assert.ok(out.output, 'the approved call has a receipt');
  return out.output!;
}

test('two replicas sharing serverReplayStore refuse the replay of a receipt the other used, and so does a restarted one', async () => {
  const receipt = await approvedReceipt();
  const ran: unknown[] = [];
  // Each replica has a store of its own, and the tool's own token.
  const store = () => serverReplayStore({ url: server.url, token: server.aliceToken });
  const a = await replica(store(), ran);
  const b = await replica(store(), ran);
  assert.equal(await a(receipt), '200 ok');
  assert.equal(await b(receipt), '409 receipt_replayed');
  assert.equal(await a(receipt), '409 receipt_replayed');
  const restarted = await replica(store(), ran);
  assert.equal(await restarted(receipt), '409 receipt_replayed');
  assert.deepEqual(ran, [payment]);
});

test('replicas with in-memory stores each accept the same receipt once: what serverReplayStore is for', async () => {
  const receipt = await approvedReceipt();
  const ran: unknown[] = [];
  const a = await replica(new MemoryReplayStore(), ran);
  const b = await replica(new MemoryReplayStore(), ran);
  assert.equal(await a(receipt), '200 ok');
  assert.equal(await b(receipt), '200 ok');
  assert.equal(ran.length, 2);
});

test('serverReplayStore fails closed: a use the API refuses to record is receipt_unavailable, and the call does not run', async () => {
  const receipt = await approvedReceipt();
  const ran: unknown[] = [];
  const withBadToken = await replica(serverReplayStore({ url: server.url, token: 'not-a-token' }), ran);
  assert.equal(await withBadToken(receipt), '503 receipt_unavailable');
  const unreachable = await replica(serverReplayStore({ url: 'http://127.0.0.1:1', token: server.token }), ran);
  assert.equal(await unreachable(receipt), '503 receipt_unavailable');
  assert.deepEqual(ran, []);
  // The receipt was not used up by the refusals.
  const good = await replica(serverReplayStore({ url: server.url, token: server.token }), ran);
  assert.equal(await good(receipt), '200 ok');
});
