// What the README says of decisions(): the server replays, after
// Last-Event-ID, what the stream missed while it was down, so an outcome
// decided meanwhile arrives even when the client watches no approval.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Countersign, type Decided } from '@countersign/client';
import { Server, runId } from './harness.js';
import { FaultProxy } from './proxy.js';

let server: Server;
let proxy: FaultProxy;
before(async () => {
  server = await Server.start();
  proxy = await new FaultProxy(server.url).start();
});
after(async () => {
  await proxy?.stop();
  await server?.stop();
});

const payment = { amount: 1250, currency: 'EUR', recipient: 'Globex GmbH' };

test('decisions() without watch gets an outcome decided while its stream was down, replayed after Last-Event-ID', async () => {
  const cs = new Countersign({ url: proxy.url, token: server.token, agent: 'ts-agent' });
  const run = { id: runId('replay'), requested_by: 'carol' };
  const [r1, r2] = await cs.review(run, [
    { id: 'pay-1', name: 'payments.send', arguments: payment },
    { id: 'pay-2', name: 'payments.send', arguments: { ...payment, amount: 7 } },
  ]);
  const stop = new AbortController();
  const feed = cs.decisions({ signal: stop.signal, minBackoffMs: 5, maxBackoffMs: 20 });
  const next = async (): Promise<Decided> => {
    for (;;) {
      const n = await feed.next();
      if (n.done) assert.fail('the feed ended');
      if (n.value.run_id === run.id) return n.value;
    }
  };
  const first = next();
  await proxy.streamsOpened(1);
  await server.alice().decide(r1!.event_id!, { decision: 'approve' });
  assert.equal((await first).event_id, r1!.event_id);

  proxy.streamDown = true;
  const refused = proxy.sawRequest((s) => s.path === '/v1/events' && s.fault === 'status503');
  proxy.cutStreams();
  const second = next();
  await refused;
  await server.alice().decide(r2!.event_id!, { decision: 'reject', comment: 'no' });
  proxy.streamDown = false;
  const d = await second;
  assert.equal(d.event_id, r2!.event_id);
  assert.equal(d.status, 'rejected');
  const resumed = proxy.seen.filter((s) => s.path === '/v1/events' && !s.fault).at(-1)!;
  assert.ok(resumed.headers['last-event-id'], 'the reconnect sent Last-Event-ID');
  stop.abort();
  assert.equal((await feed.next()).done, true);
});
