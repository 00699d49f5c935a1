// The ADK adapter against the real framework: ADK's Runner and LlmAgent run
// a scripted model (ADK's own BaseLlm, test/adk-model.ts); the tools are
// g.tool's FunctionTools, paused with ADK's adk_request_confirmation and
// resumed with g.resume against a real `countersign serve`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { FunctionTool, InMemorySessionService, LlmAgent, Runner } from '@google/adk';
import { z } from 'zod';
import { Countersign, CountersignError } from '@countersign/client';
import { gate, genaiToJSONSchema, openConfirmations } from '@countersign/client/adk';
import { Server, agentSubject, runId } from './harness.js';
import { Spy, inLongPoll } from './spy.js';
import { appName, collect, finalText, makeAdkAgent, userId, type Ran } from './adk-agent.js';
import { ScriptedAdkModel, type ScriptedCall } from './adk-model.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

const payArgs = { amount: 1250, recipient: 'Globex GmbH' };
const pay: ScriptedCall = { id: 'call_pay', name: 'payments_send', arguments: payArgs };
const lookup: ScriptedCall = { id: 'call_lookup', name: 'lookup_invoice', arguments: { n: 42 } };
const prompt = { role: 'user', parts: [{ text: 'Pay invoice 42' }] };

/** The outcome reports a client sends (POST …/outcome). */
function reportCounter() {
  const reports: string[] = [];
  const fetch: typeof globalThis.fetch = async (input, init) => {
    const url = new URL(String(input));
    if (init?.method === 'POST' && url.pathname.endsWith('/outcome')) reports.push(url.pathname);
    return globalThis.fetch(input, init);
  };
  return { reports, client: () => new Countersign({ url: server.url, token: server.token, agent: 'ts-adk-agent', fetch }) };
}

/** An agent over an in-memory session: start() runs it until it pauses or ends, resume() runs g.resume. */
async function setup(calls: ScriptedCall[], cs: Countersign = server.agentClient('ts-adk-agent'), onRun?: (r: Ran) => void) {
  const ran: Ran[] = [];
  const sessionService = new InMemorySessionService();
  const { g, runner } = makeAdkAgent(cs, sessionService, calls, (r) => {
    ran.push(r);
    onRun?.(r);
  });
  const sessionId = runId('adk');
  await sessionService.createSession({ appName, userId, sessionId });
  const start = () => collect(runner.runAsync({ userId, sessionId, newMessage: prompt }));
  const resume = () => collect(g.resume(runner, { userId, sessionId }));
  const session = async () => (await sessionService.getSession({ appName, userId, sessionId }))!;
  return { g, runner, ran, sessionId, start, resume, session };
}

async function record(eventId: string) {
  return (await server.agentClient().approval(eventId)).record;
}

describe('Google ADK', () => {
  test('approve: an allowed call runs at once; a gated one pauses the run, and after approval runs once and reports succeeded', async () => {
    const { ran, sessionId, start, resume, session } = await setup([pay, lookup]);
    const first = await start();
    assert.deepEqual(ran.map((r) => r.tool), ['lookup_invoice'], 'the allowed call ran, the gated one paused');
    const open = openConfirmations((await session()).events);
    assert.deepEqual(open.map((c) => c.call.id), ['call_pay']);
    assert.ok(first.some((e) => e.longRunningToolIds?.length), 'ADK paused on adk_request_confirmation');

    const req = await server.requestFor(sessionId, 'call_pay');
    assert.equal(req.tool_call?.name, 'payments_send');
    assert.equal(req.run.id, sessionId, 'the run id is the session id');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const text = finalText(await resume());
    assert.deepEqual(ran.filter((r) => r.tool === 'payments_send').map((r) => r.args), [payArgs]);
    assert.ok(ran.find((r) => r.tool === 'payments_send')!.receipt, 'the claimed call has its receipt on the tool context');
    assert.match(text, /call_pay: \{"sent":"1250 to Globex GmbH"\}/);
    // ADK 2.0.0 leaves out the results of a turn that paused for a confirmation: the lookup ran, and the model does not see it.
    const rec = await record(req.event_id);
    assert.ok(rec.claim, 'claimed before the tool ran');
    assert.equal(rec.execution?.status, 'succeeded');
    assert.deepEqual(openConfirmations((await session()).events), []);
  });

  test('reject: the call never runs and the model reads the reviewer\'s reason, not ADK\'s fixed refusal', async () => {
    const { ran, sessionId, start, resume, session } = await setup([pay]);
    await start();
    const req = await server.requestFor(sessionId, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'reject', comment: 'wrong account' });
    const events = await resume();
    assert.deepEqual(ran, []);
    assert.match(finalText(events), /call_pay: \{"result":"A human reviewer rejected this tool call\. Reason: wrong account"\}/);
    assert.doesNotMatch(finalText(events), /This tool call is rejected/);
    // The answer ADK recorded says what Countersign decided.
    const answer = (await session()).events
      .flatMap((e) => e.content?.parts ?? [])
      .find((p) => p.functionResponse?.name === 'adk_request_confirmation')!.functionResponse!.response as Record<string, any>;
    assert.equal(answer.confirmed, false);
    assert.equal(answer.payload.countersign.verdict, 'denied');
  });

  test('edit: an edit that fails the tool\'s zod schema is refused; a valid one runs with the edited arguments', async () => {
    const { ran, sessionId, start, resume } = await setup([pay]);
    await start();
    const req = await server.requestFor(sessionId, 'call_pay');
    await assert.rejects(
      server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 'all of it', recipient: ['Evil Corp'] } }),
      (err: unknown) => err instanceof CountersignError && err.code === 'invalid_arguments',
    );
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
    const text = finalText(await resume());
    assert.deepEqual(ran.map((r) => r.args), [{ amount: 1000, recipient: 'Globex GmbH' }]);
    assert.match(text, /call_pay: \{"sent":"1000 to Globex GmbH"\}/);
  });

  test('parallel calls: two gated calls of one model turn pause together and are each decided and run (or not) on their own', async () => {
    const second: ScriptedCall = { id: 'call_pay2', name: 'payments_send', arguments: { amount: 99, recipient: 'Initech' } };
    const { ran, sessionId, start, resume, session } = await setup([pay, second]);
    await start();
    assert.deepEqual(openConfirmations((await session()).events).map((c) => c.call.id).sort(), ['call_pay', 'call_pay2']);
    const a = await server.requestFor(sessionId, 'call_pay');
    const b = await server.requestFor(sessionId, 'call_pay2');
    const resuming = resume();
    await server.alice().decide(b.event_id, { decision: 'reject', comment: 'not this one' });
    await server.alice().decide(a.event_id, { decision: 'approve' });
    const text = finalText(await resuming);
    assert.deepEqual(ran.map((r) => r.args), [payArgs]);
    assert.match(text, /call_pay: \{"sent":"1250 to Globex GmbH"\}/);
    assert.match(text, /call_pay2: .*not this one/);
  });

  test('a call the policy denies never pauses: the tool answers the policy\'s reason at once', async () => {
    const ran: unknown[] = [];
    const sessionService = new InMemorySessionService();
    const g = gate(server.agentClient('ts-adk-agent'));
    const shell = g.tool({ name: 'shell.exec', description: 'Run a command', parameters: z.object({ cmd: z.string() }), execute: (args) => ran.push(args) });
    const model = new ScriptedAdkModel([{ id: 'call_sh', name: 'shell.exec', arguments: { cmd: 'ls' } }]);
    const runner = new Runner({ appName, agent: new LlmAgent({ name: 'ops', model, tools: [shell] }), sessionService });
    const sessionId = runId('adk-deny');
    await sessionService.createSession({ appName, userId, sessionId });
    const events = await collect(runner.runAsync({ userId, sessionId, newMessage: prompt }));
    assert.deepEqual(ran, []);
    assert.ok(!events.some((e) => e.longRunningToolIds?.length), 'nothing paused');
    assert.match(finalText(events), /call_sh: \{"result":"Agents may not run shell commands\."\}/);
  });

  test('outcome: reported succeeded once, or failed with the error\'s message; resuming the finished session runs and reports nothing more', async () => {
    for (const fails of [false, true]) {
      const counter = reportCounter();
      const { ran, sessionId, start, resume } = await setup([pay], counter.client(), () => {
        if (fails) throw new Error('payments service unavailable');
      });
      await start();
      const req = await server.requestFor(sessionId, 'call_pay');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      const text = finalText(await resume());
      const x = (await record(req.event_id)).execution;
      assert.equal(x?.status, fails ? 'failed' : 'succeeded');
      if (fails) {
        assert.equal(x?.summary, 'payments service unavailable');
        assert.match(text, /payments service unavailable/);
      }
      assert.deepEqual(await resume(), []);
      assert.equal(ran.length, 1);
      assert.equal(counter.reports.length, 1);
    }
  });

  test('the server restarts while g.resume waits: the wait goes on and the approved call runs once', async () => {
    const { ran, sessionId, start, resume } = await setup([pay]);
    await start();
    const req = await server.requestFor(sessionId, 'call_pay');
    const resuming = resume();
    await server.restart();
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const text = finalText(await resuming);
    assert.equal(ran.length, 1);
    assert.match(text, /call_pay: \{"sent":"1250 to Globex GmbH"\}/);
  });

  test('aborting g.resume while it waits cancels the approvals it waits on; the tool never runs', async () => {
    const spy = new Spy();
    const { ran, sessionId, start, g, runner } = await setup([pay], spy.client(server, { agent: 'ts-adk-agent' }));
    await start();
    const req = await server.requestFor(sessionId, 'call_pay');
    const stop = new AbortController();
    const resuming = collect(g.resume(runner, { userId, sessionId, signal: stop.signal }));
    await spy.until(inLongPoll);
    stop.abort(new Error('the user closed the chat'));
    await assert.rejects(resuming, /the user closed the chat/);
    const rec = await server.decided(req.event_id);
    assert.equal(rec.status, 'cancelled');
    assert.deepEqual(rec.outcome?.decided_by, [agentSubject]);
    assert.deepEqual(ran, []);
  });

  test('resume in a new process: the paused session lives in ADK\'s DatabaseSessionService; another worker resumes it, once', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'adk-workers-'));
    const db = path.join(dir, 'sessions.db');
    const logFile = path.join(dir, 'tool.log');
    await writeFile(logFile, '');
    const sessionId = runId('adk-workers');
    const worker = path.join(path.dirname(fileURLToPath(import.meta.url)), 'adk-worker.js');
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token };
    const exec = (mode: string) => promisify(execFile)(process.execPath, [worker, mode, db, sessionId, JSON.stringify([pay]), logFile], { env });

    assert.deepEqual(JSON.parse((await exec('start')).stdout), { paused: 1 });
    const req = await server.requestFor(sessionId, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
    const b = await exec('resume');
    assert.match(JSON.parse(b.stdout).text, /call_pay: \{"sent":"1000 to Globex GmbH"\}/);
    // Another worker resuming the same session finds nothing open and runs nothing.
    assert.deepEqual(JSON.parse((await exec('resume')).stdout), { text: '' });
    const runs = (await readFile(logFile, 'utf8')).trim().split('\n').filter(Boolean);
    assert.deepEqual(runs.map((l) => JSON.parse(l)), [{ amount: 1000, recipient: 'Globex GmbH' }]);
    assert.equal((await record(req.event_id)).execution?.status, 'succeeded');
  });
});

describe('Google ADK, schemas', () => {
  test('a tool declared with a Gemini Schema is reviewed with its JSON Schema: an invalid edit is refused', async () => {
    const g = gate(server.agentClient('ts-adk-agent'));
    const parameters = {
      type: 'OBJECT',
      properties: { amount: { type: 'NUMBER' }, recipient: { type: 'STRING', minLength: '1' }, memo: { type: 'STRING', nullable: true } },
      required: ['amount', 'recipient'],
    } as const;
    assert.deepEqual(genaiToJSONSchema(parameters), {
      type: 'object',
      properties: { amount: { type: 'number' }, recipient: { type: 'string', minLength: 1 }, memo: { type: ['string', 'null'] } },
      required: ['amount', 'recipient'],
    });
    const ran: unknown[] = [];
    const tool = g.tool({ name: 'payments_send', description: 'Send a payment', parameters: parameters as any, execute: (args) => ran.push(args) });
    assert.ok(tool instanceof FunctionTool);
    const sessionService = new InMemorySessionService();
    const runner = new Runner({ appName, agent: new LlmAgent({ name: 'billing', model: new ScriptedAdkModel([pay]), tools: [tool] }), sessionService });
    const sessionId = runId('adk-genai');
    await sessionService.createSession({ appName, userId, sessionId });
    await collect(runner.runAsync({ userId, sessionId, newMessage: prompt }));
    const req = await server.requestFor(sessionId, 'call_pay');
    await assert.rejects(
      server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 5, recipient: '' } }),
      (err: unknown) => err instanceof CountersignError && err.code === 'invalid_arguments',
    );
    await server.alice().decide(req.event_id, { decision: 'approve' });
    await collect(g.resume(runner, { userId, sessionId }));
    assert.deepEqual(ran, [payArgs]);
  });
});
