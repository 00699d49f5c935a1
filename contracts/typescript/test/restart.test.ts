// A wait outlives a restart of the server: the server is killed (SIGKILL)
// late in a long poll — later than the retry window of an ordinary request
// — and started again on the same data directory and port; the approval
// that follows runs the call, once.
import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { Server, runId } from './harness.js';
import { Spy, inLongPoll } from './spy.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

// A wait that outlives restarts waits as long as the server may come back:
// a failed test ends its waits with this signal, or they would keep the
// process alive. (cancelOnAbort: false: the abort only stops waiting.)
let stop = new AbortController();
afterEach(() => {
  stop.abort(new Error('the test is over'));
  stop = new AbortController();
});

const payment = { amount: 1250, currency: 'EUR', recipient: 'Globex GmbH' };

// The situation of a 60 s long poll whose server dies 45 s in, with a 30 s
// retry window, in a fraction of the time: 4 s polls, a 300 ms window, and
// the kill 900 ms into the poll.
const pollMs = 4_000;
const forMs = 300;
const killAfterMs = 3 * forMs;

test('run waits through a restart of the server late in a long poll, then runs the approved call once', async () => {
  const spy = new Spy();
  let pollStarted = 0;
  spy.before = (s) => {
    if (inLongPoll(s) && !pollStarted) pollStarted = Date.now();
  };
  const cs = spy.client(server, { pollMs, retry: { forMs, minBackoffMs: 20, maxBackoffMs: 200 }, cancelOnAbort: false });
  const run = { id: runId('restart'), requested_by: 'carol' };
  const call = { id: 'pay-1', name: 'payments.send', arguments: payment };
  let ran = 0;
  const running = cs.run(
    run,
    call,
    (args) => {
      ran++;
      return args;
    },
    { signal: stop.signal },
  );
  const request = await server.requestFor(run.id, 'pay-1');
  await spy.until(inLongPoll);
  // Time in the poll is the condition under test: the failure must come
  // later than forMs after the request began.
  await delay(Math.max(0, pollStarted + killAfterMs - Date.now()));
  const pollsBefore = spy.sent.filter(inLongPoll).length;
  await server.kill();
  // The client keeps asking while the server is down.
  await spy.until((s) => inLongPoll(s) && spy.sent.filter(inLongPoll).length > pollsBefore);
  await server.restart();

  await server.alice().decide(request.event_id, { decision: 'approve', comment: 'after the restart' });
  const out = await running;
  assert.equal(out.result.verdict, 'allowed');
  assert.equal(out.result.event_id, request.event_id);
  assert.equal(ran, 1);
  assert.deepEqual(out.output, payment);

  // The same call again (another worker, a retry) does not run it twice.
  const again = await cs.run(run, call, () => {
    ran++;
  });
  assert.equal(again.result.verdict, 'already_executed');
  assert.equal(ran, 1);
});

test('waitDecided and ask wait through a restart the same way', async () => {
  const spy = new Spy();
  let pollStarted = 0;
  const inWait = (s: { method: string; path: string }) =>
    (s.method === 'GET' && /^\/v1\/approvals\/[^/?]+\?wait=/.test(s.path)) || (s.method === 'POST' && s.path.startsWith('/v1/questions?wait='));
  spy.before = (s) => {
    if (inWait(s) && !pollStarted) pollStarted = Date.now();
  };
  const cs = spy.client(server, { pollMs, retry: { forMs, minBackoffMs: 20, maxBackoffMs: 200 }, cancelOnAbort: false });
  const run = { id: runId('restart-wait'), requested_by: 'carol' };
  const [pending] = await cs.review(run, [{ id: 'pay-2', name: 'payments.send', arguments: payment }]);
  assert.equal(pending!.verdict, 'pending');
  const waiting = cs.waitDecided([pending!.event_id!], { signal: stop.signal });
  const asking = cs.ask({ id: 'q-1', text: 'Which cost centre?' }, { run, signal: stop.signal });
  const question = await server.requested((r) => r.run.id === run.id && r.kind === 'human_input');
  await spy.until((s) => s.method === 'GET' && s.path.startsWith(`/v1/approvals/${pending!.event_id}?wait=`));
  await spy.until((s) => s.method === 'POST' && s.path.startsWith('/v1/questions?wait='));
  await delay(Math.max(0, pollStarted + killAfterMs - Date.now()));
  await server.restart();

  await server.alice().decide(pending!.event_id!, { decision: 'reject', comment: 'not this one' });
  await server.alice().decide(question.event_id, { decision: 'answer', answer: { action: 'accept', content: { text: 'R&D' } } });
  const [state] = await waiting;
  assert.equal(state!.record.status, 'rejected');
  const answer = await asking;
  assert.equal(answer.status, 'answered');
  assert.equal(answer.event_id, question.event_id);
  assert.deepEqual(answer.answer?.content, { text: 'R&D' });
});
