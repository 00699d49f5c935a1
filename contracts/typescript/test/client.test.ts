import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Countersign, CountersignError, newClaimId, type Decided } from '@countersign/client';
import { Server, runId } from './harness.js';
import { FaultProxy } from './proxy.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

const payment = { amount: 1250, currency: 'EUR', recipient: 'Globex GmbH' };

describe('review, claim and run against the real API', () => {
  test('a call the policy allows runs at once, without a claim', async () => {
    const cs = server.agentClient();
    const calls: unknown[] = [];
    const out = await cs.run({ id: runId() }, { id: 'c1', name: 'lookup_invoice', arguments: { n: 42 } }, (args) => {
      calls.push(args);
      return 'found';
    });
    assert.equal(out.result.verdict, 'allowed');
    assert.equal(out.result.event_id, undefined);
    assert.deepEqual(calls, [{ n: 42 }]);
    assert.equal(out.output, 'found');
  });

  test('tool calls in OpenAI and Anthropic shapes are reviewed as they come from the model', async () => {
    const cs = server.agentClient();
    const results = await cs.review({ id: runId() }, [
      { id: 'call_1', type: 'function', function: { name: 'lookup_invoice', arguments: '{"n":42}' } },
      { type: 'tool_use', id: 'toolu_2', name: 'lookup_customer', input: { name: 'Globex' } },
    ]);
    assert.deepEqual(
      results.map((r) => [r.tool_call_id, r.verdict, r.arguments]),
      [['call_1', 'allowed', { n: 42 }], ['toolu_2', 'allowed', { name: 'Globex' }]],
    );
  });

  test('a call the policy denies never runs, and says why', async () => {
    const cs = server.agentClient();
    const out = await cs.run({ id: runId() }, { id: 'c1', name: 'shell.exec', arguments: { cmd: 'rm -rf /' } }, () => {
      assert.fail('a denied call ran');
    });
    assert.equal(out.result.verdict, 'denied');
    assert.equal(out.ran, false);
    assert.match(out.result.reason!, /shell commands/);
  });

  test('a gated call waits, runs once after approval, and its approval is single use', async () => {
    const cs = server.agentClient();
    const run = { id: runId(), requested_by: 'carol' };
    const [first] = await cs.review(run, [{ id: 'pay-1', name: 'payments.send', arguments: payment }]);
    assert.equal(first!.verdict, 'pending');
    assert.ok(first!.event_id);
    let ran = 0;
    const running = cs.run(run, { id: 'pay-1', name: 'payments.send', arguments: payment }, (args) => {
      ran++;
      return args;
    });
    await server.alice().decide(first!.event_id!, { decision: 'approve', comment: 'invoice checked' });
    const out = await running;
    assert.equal(out.result.verdict, 'allowed');
    assert.equal(ran, 1);
    assert.deepEqual(out.output, payment);

    // Running the same call again (a retry, another worker) does not run it again.
    const again = await cs.run(run, { id: 'pay-1', name: 'payments.send', arguments: payment }, () => {
      ran++;
    });
    assert.equal(again.result.verdict, 'already_executed');
    assert.equal(ran, 1);

    // A claim with another id is refused; the record keeps the first claim.
    await assert.rejects(cs.claim(first!.event_id!, { claimId: newClaimId() }), (err: unknown) => {
      assert.ok(err instanceof CountersignError);
      assert.equal(err.code, 'already_claimed');
      assert.equal(err.status, 409);
      return true;
    });
  });

  test('a batch that waits hands over its allowed calls at once, not after the pending one is decided', async () => {
    const cs = server.agentClient();
    const run = { id: runId(), requested_by: 'carol' };
    const calls = [
      { id: 'look', name: 'lookup_invoice', arguments: { n: 7 } },
      { id: 'pay', name: 'payments.send', arguments: payment },
    ];
    const seen: string[] = [];
    let allowedFirst!: () => void;
    const allowedSeen = new Promise<void>((resolve) => (allowedFirst = resolve));
    const done = cs.review(run, calls, {
      wait: true,
      onResult: (r, i) => {
        seen.push(`${i}:${r.verdict}`);
        if (r.verdict === 'allowed' && i === 0) allowedFirst();
      },
    });
    // The allowed call is handed over while the payment still waits.
    await allowedSeen;
    assert.deepEqual(seen, ['0:allowed']);
    const [pending] = await cs.review(run, [calls[1]!]);
    assert.equal(pending!.verdict, 'pending');
    await server.alice().decide(pending!.event_id!, { decision: 'approve' });
    const results = await done;
    assert.deepEqual(results.map((r) => r.verdict), ['allowed', 'allowed']);
    assert.deepEqual(seen, ['0:allowed', '1:allowed']);
  });

  test('a claim retried with the same claim id succeeds again; without one it is refused locally', async () => {
    const cs = server.agentClient();
    const run = { id: runId(), requested_by: 'carol' };
    const [r] = await cs.review(run, [{ id: 'pay-1', name: 'payments.send', arguments: payment }]);
    await server.alice().decide(r!.event_id!, { decision: 'approve' });
    const claimId = newClaimId();
    const rec1 = await cs.claim(r!.event_id!, { claimId });
    const rec2 = await cs.claim(r!.event_id!, { claimId });
    assert.equal(rec1.claim?.claim_id, claimId);
    assert.equal(rec2.claim?.claim_id, claimId);
    await assert.rejects(cs.claim(r!.event_id!, { claimId: '' }), { code: 'invalid_field', field: 'claim_id' });
  });

  test('a claim on an approval that is not approved is refused with not_approved', async () => {
    const cs = server.agentClient();
    const [r] = await cs.review({ id: runId(), requested_by: 'carol' }, [{ id: 'pay-1', name: 'payments.send', arguments: payment }]);
    await assert.rejects(cs.claim(r!.event_id!, { claimId: newClaimId() }), { code: 'not_approved', status: 409 });
  });

  test('a rejection reaches the caller as the reason, with the reviewer comment', async () => {
    const cs = server.agentClient();
    const run = { id: runId(), requested_by: 'carol' };
    const running = cs.run(run, { id: 'pay-1', name: 'payments.send', arguments: payment }, () => assert.fail('ran'));
    const req = await server.requestFor(run.id, 'pay-1');
    await server.alice().decide(req.event_id, { decision: 'reject', comment: 'wrong account' });
    const out = await running;
    assert.equal(out.result.verdict, 'denied');
    assert.match(out.result.reason!, /rejected.*wrong account/);
  });

  test('an edit runs with the edited arguments', async () => {
    const cs = server.agentClient();
    const run = { id: runId(), requested_by: 'carol' };
    let got: unknown;
    const running = cs.run(run, { id: 'pay-1', name: 'payments.send', arguments: payment }, (args) => {
      got = args;
    });
    const req = await server.requestFor(run.id, 'pay-1');
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { ...payment, amount: 1000 } });
    const out = await running;
    assert.equal(out.result.verdict, 'allowed');
    assert.deepEqual(got, { ...payment, amount: 1000 });
  });

  test('a worker that crashed between claim and run: the next worker does not run the call again', async () => {
    const run = { id: runId(), requested_by: 'carol' };
    const call = { id: 'pay-1', name: 'payments.send', arguments: payment };
    // Worker A: reviews, is approved, claims — and dies before running.
    {
      const a = server.agentClient();
      const [r] = await a.review(run, [call]);
      await server.alice().decide(r!.event_id!, { decision: 'approve' });
      const [decided] = await a.review(run, [call], { wait: true });
      assert.equal(decided!.verdict, 'allowed');
      await a.claim(decided!.event_id!, { claimId: newClaimId() });
    }
    // Worker B: a fresh client with nothing of A's state re-runs the call.
    const b = new Countersign({ url: server.url, token: server.token, agent: 'ts-agent' });
    const out = await b.run(run, call, () => assert.fail('the call ran a second time'));
    assert.equal(out.ran, false);
    assert.equal(out.result.verdict, 'already_executed');
  });

  test('bad input is a CountersignError with status, code and field', async () => {
    const cs = server.agentClient();
    await assert.rejects(cs.review({ id: runId(), agent: 'x'.repeat(300) }, [{ name: 'lookup_x' }]), (err: unknown) => {
      assert.ok(err instanceof CountersignError);
      assert.equal(err.status, 400);
      assert.equal(err.code, 'invalid_field');
      assert.equal(err.field, 'run.agent');
      assert.ok(err.message.length > 0);
      return true;
    });
    await assert.rejects(cs.approval('no-such-approval'), { status: 404, code: 'unknown_event' });
    const stranger = new Countersign({ url: server.url, token: 'not-a-token', agent: 'a' });
    await assert.rejects(stranger.review({}, [{ name: 'lookup_x' }]), { status: 401, code: 'unauthenticated' });
  });

  test('ask: a human answers a question', async () => {
    const cs = server.agentClient();
    const run = { id: runId(), requested_by: 'carol' };
    const asking = cs.ask({ id: 'q-1', text: 'Which cost centre?', schema: { type: 'object', properties: { centre: { type: 'string' } } } }, { run });
    const req = await server.requested((r) => r.run.id === run.id && r.kind === 'human_input');
    await server.alice().decide(req.event_id, { decision: 'answer', answer: { action: 'accept', content: { centre: 'R&D' } } });
    const a = await asking;
    assert.equal(a.status, 'answered');
    assert.equal(a.answer?.action, 'accept');
    assert.deepEqual(a.answer?.content, { centre: 'R&D' });
  });
});

describe('retries', () => {
  let proxy: FaultProxy;
  before(async () => {
    proxy = await new FaultProxy(server.url).start();
  });
  after(async () => {
    await proxy?.stop();
  });

  const viaProxy = () =>
    new Countersign({ url: proxy.url, token: server.token, agent: 'ts-agent', retry: { forMs: 10_000, minBackoffMs: 5, maxBackoffMs: 20 } });

  test('a claim is retried through 503, a dropped connection and 202, with the same claim id', async () => {
    const cs = viaProxy();
    const run = { id: runId(), requested_by: 'carol' };
    const [r] = await cs.review(run, [{ id: 'pay-1', name: 'payments.send', arguments: payment }]);
    await server.alice().decide(r!.event_id!, { decision: 'approve' });
    const claimPath = new RegExp(`/v1/approvals/${r!.event_id}/claim`);
    proxy.faults.push({ match: claimPath, fault: 'status503' }, { match: claimPath, fault: 'drop' }, { match: claimPath, fault: 'accepted202' });
    const claimId = newClaimId();
    const rec = await cs.claim(r!.event_id!, { claimId });
    assert.equal(rec.claim?.claim_id, claimId);
    const attempts = proxy.seen.filter((s) => claimPath.test(s.path));
    assert.deepEqual(attempts.map((s) => s.fault), ['status503', 'drop', 'accepted202', undefined]);
    assert.ok(attempts.every((s) => JSON.parse(s.body).claim_id === claimId));
  });

  test('a refusal is never retried', async () => {
    const cs = viaProxy();
    const [r] = await cs.review({ id: runId(), requested_by: 'carol' }, [{ id: 'pay-1', name: 'payments.send', arguments: payment }]);
    const claimPath = new RegExp(`/v1/approvals/${r!.event_id}/claim`);
    await assert.rejects(cs.claim(r!.event_id!, { claimId: newClaimId() }), { code: 'not_approved' });
    assert.equal(proxy.seen.filter((s) => claimPath.test(s.path)).length, 1);
  });

  test('retries are bounded: a server that stays unavailable fails with its code', async () => {
    const cs = new Countersign({ url: proxy.url, token: server.token, agent: 'ts-agent', retry: { forMs: 50, minBackoffMs: 5, maxBackoffMs: 10 } });
    const path = /\/v1\/approvals\/bounded-probe$/;
    for (let i = 0; i < 100; i++) proxy.faults.push({ match: path, fault: 'status503' });
    await assert.rejects(cs.approval('bounded-probe'), { status: 503, code: 'unavailable' });
    const n = proxy.seen.filter((s) => path.test(s.path)).length;
    assert.ok(n >= 2 && n < 100, `${n} attempts`);
    proxy.faults = [];
  });

  test('a review without ids is not retried (it would ask twice); with ids it is', async () => {
    const cs = viaProxy();
    proxy.faults.push({ match: /\/v1\/reviews/, fault: 'status503' });
    await assert.rejects(cs.review({}, [{ name: 'lookup_x' }]), { status: 503 });
    proxy.faults.push({ match: /\/v1\/reviews/, fault: 'status503' });
    const [r] = await cs.review({ id: runId() }, [{ id: 'c', name: 'lookup_x' }]);
    assert.equal(r!.verdict, 'allowed');
  });

  test('a waiting review without ids gets ids of its own, so every poll and retry asks about the same calls', async () => {
    const cs = viaProxy();
    const before = proxy.seen.length;
    proxy.faults.push({ match: /\/v1\/reviews/, fault: 'status503' });
    const [r] = await cs.review({}, [{ name: 'lookup_x' }], { wait: 1000 });
    assert.equal(r!.verdict, 'allowed');
    const bodies = proxy.seen.slice(before).filter((s) => s.path.startsWith('/v1/reviews')).map((s) => JSON.parse(s.body));
    assert.equal(bodies.length, 2, 'the 503 was retried');
    assert.ok(bodies[0].run.id && bodies[0].tool_calls[0].id, 'the client gave the run and the call ids');
    assert.deepEqual([bodies[1].run.id, bodies[1].tool_calls[0].id], [bodies[0].run.id, bodies[0].tool_calls[0].id]);
  });
});

describe('decisions()', () => {
  test('yields outcomes; after a reconnect it sends Last-Event-ID and re-reads the approvals it waits on', async () => {
    const proxy = await new FaultProxy(server.url).start();
    try {
      const cs = new Countersign({ url: proxy.url, token: server.token, agent: 'ts-agent' });
      const run = { id: runId(), requested_by: 'carol' };
      const [r1, r2] = await cs.review(run, [
        { id: 'pay-1', name: 'payments.send', arguments: payment },
        { id: 'pay-2', name: 'payments.send', arguments: { ...payment, amount: 7 } },
      ]);
      const waiting = new Set([r1!.event_id!, r2!.event_id!]);
      const stop = new AbortController();
      const feed = cs.decisions({ watch: () => waiting, signal: stop.signal, minBackoffMs: 5, maxBackoffMs: 20 });
      const got: Decided[] = [];
      const next = () => feed.next().then((n) => (n.done ? assert.fail('feed ended') : got.push(n.value)));

      // Live: the first decision arrives on the stream.
      const p1 = next();
      await proxy.streamsOpened(1);
      // The look-back after connecting reads r1, then r2: once r2 is asked for, r1's read is done.
      await proxy.sawRequest((s) => s.path === `/v1/approvals/${r2!.event_id}`);
      await server.alice().decide(r1!.event_id!, { decision: 'approve' });
      await p1;
      assert.equal(got[0]!.event_id, r1!.event_id);
      assert.equal(got[0]!.status, 'approved');
      waiting.delete(r1!.event_id!);

      // The stream goes down; the second decision is made while it is down.
      proxy.streamDown = true;
      const refused = proxy.sawRequest((s) => s.path === '/v1/events' && s.fault === 'status503');
      proxy.cutStreams();
      const p2 = next();
      await refused;
      await server.alice().decide(r2!.event_id!, { decision: 'reject', comment: 'no' });
      proxy.streamDown = false;
      await p2;
      assert.equal(got[1]!.event_id, r2!.event_id);
      assert.equal(got[1]!.status, 'rejected');
      assert.equal(got[1]!.outcome.comment, 'no');
      const reconnect = proxy.seen.filter((s) => s.path === '/v1/events').at(-1)!;
      assert.match(String(reconnect.headers['last-event-id']), /^HITL_\w+:\d+(,HITL_\w+:\d+)?$/, JSON.stringify(proxy.seen.filter((s) => s.path === '/v1/events').map((s) => [s.fault, s.headers])));
      stop.abort();
      assert.equal((await feed.next()).done, true);
    } finally {
      await proxy.stop();
    }
  });
});
