// cs.run hands the function the call's receipt, and receiptHeaders carries
// it to a tool behind the receipt middleware, which runs the call once.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { receiptHeader, receiptHeaders, type RunContext } from '@countersign/client';
import { RECEIPT_HEADER, receiptMiddleware, remoteKeys } from '@countersign/client/receipts';
import { Server, runId } from './harness.js';

let server: Server;
let tool: http.Server;
let toolUrl = '';
const ran: unknown[] = [];
before(async () => {
  server = await Server.start();
  const guard = receiptMiddleware({ tool: 'payments_send', keys: remoteKeys(new URL('/.well-known/jwks.json', server.url)) });
  tool = http.createServer((req, res) =>
    guard(req, res, () => {
      ran.push((req as unknown as { body: unknown }).body);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ paid: true }));
    }),
  );
  await new Promise<void>((resolve) => tool.listen(0, '127.0.0.1', resolve));
  toolUrl = `http://127.0.0.1:${(tool.address() as AddressInfo).port}/pay`;
});
after(async () => {
  await new Promise<void>((resolve) => tool?.close(() => resolve()));
  await server?.stop();
});

/** Calls the tool over HTTP as an agent's tool function would. */
async function pay(args: unknown, receipt: string | undefined): Promise<string> {
  const res = await fetch(toolUrl, {
    method: 'POST',
    body: JSON.stringify(args),
    headers: { 'content-type': 'application/json', ...receiptHeaders(receipt) },
  });
  const body = (await res.json()) as { error?: { code: string } };
  return `${res.status} ${body.error?.code ?? 'ok'}`;
}

const payment = { amount: 1250, currency: 'EUR', recipient: 'Globex GmbH' };

test('run hands the tool function the claim\'s receipt, which the receipt middleware accepts once', async () => {
  const cs = server.agentClient();
  const run = { id: runId('receipt'), requested_by: 'carol' };
  const call = { id: 'pay-1', name: 'payments_send', arguments: payment };
  let seen: RunContext | undefined;
  const running = cs.run(run, call, async (args, context) => {
    seen = context;
    return pay(args, context.receipt);
  });
  const request = await server.requestFor(run.id, 'pay-1');
  await server.alice().decide(request.event_id, { decision: 'approve' });
  const out = await running;
  assert.equal(out.result.verdict, 'allowed');
  assert.equal(out.output, '200 ok');
  assert.deepEqual(ran, [payment]);
  assert.ok(seen?.receipt, 'the function got a receipt');
  assert.equal(out.receipt, seen.receipt);
  assert.equal(seen.record?.claim?.receipt, seen.receipt);
  assert.equal(seen.result.event_id, request.event_id);
  // The receipt is single use: sent again, the tool refuses it.
  assert.equal(await pay(payment, seen.receipt), '409 receipt_replayed');
  assert.equal(ran.length, 1);
});

test('receiptHeaders names the header the middleware reads, and sends none without a receipt', async () => {
  assert.equal(receiptHeader.toLowerCase(), RECEIPT_HEADER);
  assert.deepEqual(receiptHeaders(undefined), {});
  assert.equal(await pay(payment, undefined), '401 receipt_missing');
});
