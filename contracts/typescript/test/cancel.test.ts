// Cancelling: cancel(), what an abort of a waiting call cancels and what a
// wait that merely ends leaves pending (DESIGN §5, single use), and an
// approval that lapsed before its claim — against a real `countersign serve`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CountersignError, Codes, newClaimId } from '@countersign/client';
import { Server, agentSubject, runId } from './harness.js';
import { Spy, inLongPoll } from './spy.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

const payment = { amount: 1250, currency: 'EUR', recipient: 'Globex GmbH' };
const pay = { id: 'pay-1', name: 'payments.send', arguments: payment };

/** A request that never gets an answer: it ends only when its signal aborts. */
function hang(signal: AbortSignal | undefined): Promise<never> {
  return new Promise((_, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}

describe('cancel()', () => {
  test('the agent cancels a pending approval it submitted; the record says it decided', async () => {
    const cs = server.agentClient();
    const run = { id: runId(), requested_by: 'carol' };
    const [r] = await cs.review(run, [pay]);
    assert.equal(r!.verdict, 'pending');
    const rec = (await cs.cancel(r!.event_id!, { reason: 'the user closed the chat' })) ?? (await server.decided(r!.event_id!));
    assert.equal(rec.status, 'cancelled');
    assert.equal(rec.request.submitter, agentSubject);
    assert.deepEqual(rec.outcome?.decided_by, [agentSubject]);
    // The call reviewed again does not run.
    const [again] = await cs.review(run, [pay]);
    assert.equal(again!.verdict, 'cancelled');
  });

  test('cancelling an approval decided already fails with closed and changes nothing', async () => {
    const cs = server.agentClient();
    const [r] = await cs.review({ id: runId(), requested_by: 'carol' }, [pay]);
    await server.alice().decide(r!.event_id!, { decision: 'approve' });
    await assert.rejects(cs.cancel(r!.event_id!), (err: unknown) => {
      assert.ok(err instanceof CountersignError);
      assert.equal(err.code, Codes.closed);
      assert.equal(err.status, 409);
      return true;
    });
    assert.equal((await cs.approval(r!.event_id!)).record.status, 'approved');
  });
});

describe('an abort cancels the approvals a wait opened', () => {
  test('review: aborted in its long poll, it cancels the approval and rejects with the reason', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const stop = new AbortController();
    const waiting = cs.review(run, [pay], { wait: true, signal: stop.signal });
    await spy.until(inLongPoll);
    const reason = new Error('the user closed the chat');
    stop.abort(reason);
    await assert.rejects(waiting, (err: unknown) => err === reason);
    const { event_id } = await server.requestFor(run.id, pay.id);
    const rec = await server.decided(event_id);
    assert.equal(rec.status, 'cancelled');
    assert.deepEqual(rec.outcome?.decided_by, [agentSubject]);
    const [cancel] = spy.cancels(event_id);
    assert.match(JSON.parse(cancel!.body).reason, /aborted.*the user closed the chat/);
  });

  test('review: aborted before its first answer, it still learns what that request opened and cancels it', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const stop = new AbortController();
    // The abort comes while the first request is on its way.
    spy.before = (s) => {
      if (s.method === 'POST' && s.path === '/v1/reviews') stop.abort(new Error('stop'));
    };
    await assert.rejects(cs.review(run, [pay], { wait: true, signal: stop.signal }), /stop/);
    assert.equal(spy.sent.filter(inLongPoll).length, 0, 'no long poll began');
    const { event_id } = await server.requestFor(run.id, pay.id);
    assert.equal((await server.decided(event_id)).status, 'cancelled');
  });

  test('a batch: only the calls still pending are cancelled', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const calls = [
      { id: 'look', name: 'lookup_invoice', arguments: { n: 7 } },
      { id: 'pay-a', name: 'payments.send', arguments: payment },
      { id: 'pay-b', name: 'payments.send', arguments: { ...payment, amount: 7 } },
    ];
    const [, a, b] = await cs.review(run, calls);
    await server.alice().decide(a!.event_id!, { decision: 'approve' });
    const stop = new AbortController();
    const waiting = cs.review(run, calls, { wait: true, signal: stop.signal });
    await spy.until(inLongPoll);
    stop.abort(new Error('stop'));
    await assert.rejects(waiting, /stop/);
    assert.equal((await cs.approval(a!.event_id!)).record.status, 'approved');
    assert.equal((await server.decided(b!.event_id!)).status, 'cancelled');
    assert.deepEqual(spy.cancels(a!.event_id!), [], 'a decided approval is not cancelled');
  });

  test('run: an abort while it waits cancels the approval; the function never runs', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const stop = new AbortController();
    const running = cs.run(run, pay, () => assert.fail('the aborted call ran'), { signal: stop.signal });
    await spy.until(inLongPoll);
    stop.abort(new Error('stop'));
    await assert.rejects(running, /stop/);
    const { event_id } = await server.requestFor(run.id, pay.id);
    assert.equal((await server.decided(event_id)).status, 'cancelled');
  });

  test('ask: an abort while it waits cancels the question', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const stop = new AbortController();
    const asking = cs.ask({ id: 'q-1', text: 'Which cost centre?' }, { run, signal: stop.signal });
    await spy.until((s) => s.method === 'POST' && s.path.startsWith('/v1/questions?wait='));
    stop.abort(new Error('stop'));
    await assert.rejects(asking, /stop/);
    const req = await server.requested((r) => r.run.id === run.id && r.kind === 'human_input');
    assert.equal((await server.decided(req.event_id)).status, 'cancelled');
  });

  test('waitDecided: an abort cancels the approvals still pending, not those decided', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const [a, b] = await cs.review(run, [pay, { ...pay, id: 'pay-2' }]);
    await server.alice().decide(a!.event_id!, { decision: 'approve' });
    const stop = new AbortController();
    const waiting = cs.waitDecided([a!.event_id!, b!.event_id!], { signal: stop.signal });
    await spy.until((s) => s.path.startsWith(`/v1/approvals/${b!.event_id}?wait=`));
    stop.abort(new Error('stop'));
    await assert.rejects(waiting, /stop/);
    assert.equal((await cs.approval(a!.event_id!)).record.status, 'approved');
    assert.equal((await server.decided(b!.event_id!)).status, 'cancelled');
  });

  test('the abort is bounded: a cancel that gets no answer is given up after withinMs and reported', async () => {
    const failed: Array<[unknown, string]> = [];
    const spy = new Spy();
    const cs = spy.client(server, { cancelOnAbort: { withinMs: 200, onError: (err, id) => failed.push([err, id]) } });
    spy.before = (s, signal) => (s.path.endsWith('/cancel') ? hang(signal) : undefined);
    const run = { id: runId(), requested_by: 'carol' };
    const stop = new AbortController();
    const waiting = cs.review(run, [pay], { wait: true, signal: stop.signal });
    await spy.until(inLongPoll);
    const started = Date.now();
    stop.abort(new Error('stop'));
    await assert.rejects(waiting, /stop/);
    const took = Date.now() - started;
    assert.ok(took < 5_000, `the abort took ${took} ms`);
    const { event_id } = await server.requestFor(run.id, pay.id);
    assert.deepEqual(failed.map(([, id]) => id), [event_id]);
    assert.equal((await cs.approval(event_id)).record.status, 'pending');
  });
});

describe('a wait that merely ends cancels nothing', () => {
  test('a bounded wait that runs out answers pending, and the approval stays open for a later wait', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const stop = new AbortController();
    const [r] = await cs.review(run, [pay], { wait: 300, signal: stop.signal });
    assert.equal(r!.verdict, 'pending');
    assert.equal((await cs.approval(r!.event_id!)).record.status, 'pending');
    assert.deepEqual(spy.cancels(r!.event_id!), []);
    // Another wait (another worker) re-attaches and gets the decision.
    const later = cs.review(run, [pay], { wait: true });
    await server.alice().decide(r!.event_id!, { decision: 'approve' });
    assert.equal((await later)[0]!.verdict, 'allowed');
  });

  test('with cancelOnAbort: false an abort only stops waiting', async () => {
    const spy = new Spy();
    const cs = spy.client(server, { cancelOnAbort: false });
    const run = { id: runId(), requested_by: 'carol' };
    const event_id = (await cs.review(run, [pay]))[0]!.event_id!;
    const stop = new AbortController();
    const waiting = cs.review(run, [pay], { wait: true, signal: stop.signal });
    await spy.until(inLongPoll);
    stop.abort(new Error('stop'));
    await assert.rejects(waiting, /stop/);
    assert.equal((await cs.approval(event_id)).record.status, 'pending');
    assert.deepEqual(spy.cancels(event_id), []);
  });
});

describe('an approval that lapsed', () => {
  const deploy = { id: 'deploy-1', name: 'deploy_service', arguments: { service: 'billing', version: '1.2.3' } };

  /** Waits until the rule's claim_within (1 s) has passed since the decision: only the clock can say so. */
  async function lapse(decidedAt: string): Promise<void> {
    const ms = Date.parse(decidedAt) + 1_100 - Date.now();
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
  }

  test('a claim after claim_within fails with approval_lapsed at once, not retried; a new review answers expired', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const [r] = await cs.review(run, [deploy]);
    const rec = await server.alice().decide(r!.event_id!, { decision: 'approve' });
    await lapse(rec.outcome!.decided_at);
    await assert.rejects(cs.claim(r!.event_id!, { claimId: newClaimId() }), (err: unknown) => {
      assert.ok(err instanceof CountersignError);
      assert.equal(err.code, Codes.approvalLapsed);
      assert.equal(err.status, 409);
      assert.match(err.message, /lapsed/);
      return true;
    });
    assert.equal(spy.sent.filter((s) => s.path.endsWith('/claim')).length, 1, 'a refusal is not retried');
    const [again] = await cs.review(run, [deploy]);
    assert.equal(again!.verdict, 'expired');
    const out = await cs.run(run, deploy, () => assert.fail('a lapsed approval ran'));
    assert.deepEqual([out.ran, out.result.verdict], [false, 'expired']);
  });

  test('run: a claim that finds the approval lapsed comes back expired, and the function does not run', async () => {
    const spy = new Spy();
    const cs = spy.client(server);
    const run = { id: runId(), requested_by: 'carol' };
    const [r] = await cs.review(run, [deploy]);
    const rec = await server.alice().decide(r!.event_id!, { decision: 'approve' });
    // The review still says allowed; the claim is held back until the approval lapsed.
    spy.before = (s) => (s.path.endsWith('/claim') ? lapse(rec.outcome!.decided_at) : undefined);
    const out = await cs.run(run, deploy, () => assert.fail('a lapsed approval ran'));
    assert.equal(out.ran, false);
    assert.equal(out.result.verdict, 'expired');
    assert.equal(out.result.code, Codes.approvalLapsed);
    assert.match(out.result.reason!, /lapsed/);
    assert.equal(spy.sent.filter((s) => s.path.endsWith('/claim')).length, 1);
  });
});
