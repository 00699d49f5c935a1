// The Mastra adapter against the real framework (on Node 22, which
// @mastra/core needs: scripts/node22.mjs): a Mastra Agent over a scripted AI
// SDK model, g.tool's tools suspending while Countersign waits for a human,
// the suspended run kept in Mastra's storage (libSQL in a file) and resumed
// with g.resume against a real `countersign serve`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Mastra } from '@mastra/core';
import { Agent } from '@mastra/core/agent';
import { LibSQLStore } from '@mastra/libsql';
import { z } from 'zod';
import { Countersign, CountersignError } from '@countersign/client';
import { gate } from '@countersign/client/mastra';
import { Server, agentSubject } from '../harness.js';
import { Spy } from '../spy.js';
import type { ScriptedCall } from '../models.js';
import { makeMastraAgent, streamingModel, type Ran } from './mastra-agent.js';

let server: Server;
let dir: string;
before(async () => {
  server = await Server.start();
  dir = await mkdtemp(path.join(tmpdir(), 'countersign-mastra-'));
});
after(async () => {
  await server?.stop();
});

const payArgs = { amount: 1250, recipient: 'Globex GmbH' };
const pay: ScriptedCall = { id: 'call_pay', name: 'payments_send', arguments: payArgs };
const lookup: ScriptedCall = { id: 'call_lookup', name: 'lookup_invoice', arguments: { n: 42 } };
let dbs = 0;

/** The outcome reports a client sends (POST …/outcome). */
function reportCounter() {
  const reports: string[] = [];
  const fetch: typeof globalThis.fetch = async (input, init) => {
    const url = new URL(String(input));
    if (init?.method === 'POST' && url.pathname.endsWith('/outcome')) reports.push(url.pathname);
    return globalThis.fetch(input, init);
  };
  return { reports, client: () => new Countersign({ url: server.url, token: server.token, agent: 'ts-mastra-agent', fetch }) };
}

function setup(calls: ScriptedCall[], cs: Countersign = server.agentClient('ts-mastra-agent'), onRun?: (r: Ran) => void) {
  const ran: Ran[] = [];
  const { g, agent } = makeMastraAgent(cs, path.join(dir, `mastra-${++dbs}.db`), calls, (r) => {
    ran.push(r);
    onRun?.(r);
  });
  return { g, agent, ran };
}

async function record(eventId: string) {
  return (await server.agentClient().approval(eventId)).record;
}

describe('Mastra', () => {
  test('approve: an allowed call runs at once; a gated one suspends the run, and after approval runs once and reports succeeded', async () => {
    const { g, agent, ran } = setup([pay, lookup]);
    const first = await agent.generate('Pay invoice 42');
    assert.equal(first.finishReason, 'suspended');
    assert.deepEqual(ran.map((r) => r.tool), ['lookup_invoice'], 'the allowed call ran, the gated one suspended');
    const req = await server.requestFor(first.runId!, 'call_pay');
    assert.equal(req.tool_call?.name, 'payments_send');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const out = await g.resume(agent, first.runId!);
    assert.equal(out?.finishReason, 'stop');
    assert.deepEqual(ran.filter((r) => r.tool === 'payments_send').map((r) => r.args), [payArgs]);
    assert.ok(ran.find((r) => r.tool === 'payments_send')!.receipt, 'the claimed call has its receipt on the tool context');
    assert.match(out!.text, /call_pay: "sent 1250 to Globex GmbH"/);
    assert.match(out!.text, /call_lookup: "invoice 42: 1250 EUR"/);
    const rec = await record(req.event_id);
    assert.ok(rec.claim, 'claimed before the tool ran');
    assert.equal(rec.execution?.status, 'succeeded');
  });

  test('reject: the call never runs and the model reads the reviewer\'s reason as the tool result', async () => {
    const { g, agent, ran } = setup([pay]);
    const first = await agent.generate('Pay invoice 42');
    const req = await server.requestFor(first.runId!, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'reject', comment: 'wrong account' });
    const out = await g.resume(agent, first.runId!);
    assert.deepEqual(ran, []);
    assert.match(out!.text, /call_pay: "A human reviewer rejected this tool call\. Reason: wrong account"/);
  });

  test('edit: an edit that fails the tool\'s zod schema is refused; a valid one runs with the edited arguments', async () => {
    const { g, agent, ran } = setup([pay]);
    const first = await agent.generate('Pay invoice 42');
    const req = await server.requestFor(first.runId!, 'call_pay');
    await assert.rejects(
      server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 'all of it', recipient: ['Evil Corp'] } }),
      (err: unknown) => err instanceof CountersignError && err.code === 'invalid_arguments',
    );
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
    const out = await g.resume(agent, first.runId!);
    assert.deepEqual(ran.map((r) => r.args), [{ amount: 1000, recipient: 'Globex GmbH' }]);
    assert.match(out!.text, /call_pay: "sent 1000 to Globex GmbH"/);
  });

  test('parallel calls: two gated calls of one step both suspend, and are each decided and run (or not) on their own', async () => {
    const second: ScriptedCall = { id: 'call_pay2', name: 'payments_send', arguments: { amount: 99, recipient: 'Initech' } };
    const { g, agent, ran } = setup([pay, second]);
    const first = await agent.generate('Pay invoice 42');
    const a = await server.requestFor(first.runId!, 'call_pay');
    const b = await server.requestFor(first.runId!, 'call_pay2');
    const resuming = g.resume(agent, first.runId!);
    await server.alice().decide(b.event_id, { decision: 'reject', comment: 'not this one' });
    await server.alice().decide(a.event_id, { decision: 'approve' });
    const out = await resuming;
    assert.deepEqual(ran.map((r) => r.args), [payArgs]);
    assert.match(out!.text, /call_pay: "sent 1250 to Globex GmbH"/);
    assert.match(out!.text, /call_pay2: ".*not this one"/);
  });

  test('a call the policy denies never suspends: the tool answers the policy\'s reason at once', async () => {
    const g = gate(server.agentClient('ts-mastra-agent'));
    const ran: unknown[] = [];
    const shell = g.tool({ id: 'shell.exec', description: 'Run a command', inputSchema: z.object({ cmd: z.string() }), execute: async (args) => ran.push(args) });
    const model = streamingModel([{ id: 'call_sh', name: 'shell.exec', arguments: { cmd: 'ls' } }]);
    const ops = new Agent({ id: 'ops', name: 'Ops', instructions: 'Run commands.', model, tools: { 'shell.exec': shell } });
    const mastra = new Mastra({ agents: { ops }, storage: new LibSQLStore({ id: 'deny', url: `file:${path.join(dir, 'deny.db')}` }), logger: false });
    const out = await mastra.getAgent('ops').generate('List the files');
    assert.equal(out.finishReason, 'stop');
    assert.deepEqual(ran, []);
    assert.match(out.text, /call_sh: "Agents may not run shell commands\."/);
  });

  test('outcome: reported succeeded once, or failed with the error\'s message; resuming the finished run runs and reports nothing more', async () => {
    for (const fails of [false, true]) {
      const counter = reportCounter();
      const { g, agent, ran } = setup([pay], counter.client(), () => {
        if (fails) throw new Error('payments service unavailable');
      });
      const first = await agent.generate('Pay invoice 42');
      const req = await server.requestFor(first.runId!, 'call_pay');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      await g.resume(agent, first.runId!);
      const x = (await record(req.event_id)).execution;
      assert.equal(x?.status, fails ? 'failed' : 'succeeded');
      if (fails) assert.equal(x?.summary, 'payments service unavailable');
      assert.equal(await g.resume(agent, first.runId!), undefined);
      assert.equal(ran.length, 1);
      assert.equal(counter.reports.length, 1);
    }
  });

  test('the server restarts while g.resume waits: the wait goes on and the approved call runs once', async () => {
    const { g, agent, ran } = setup([pay]);
    const first = await agent.generate('Pay invoice 42');
    const req = await server.requestFor(first.runId!, 'call_pay');
    const resuming = g.resume(agent, first.runId!);
    await server.restart();
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const out = await resuming;
    assert.equal(ran.length, 1);
    assert.match(out!.text, /call_pay: "sent 1250 to Globex GmbH"/);
  });

  test('aborting g.resume while it waits cancels the approvals it waits on; the tool never runs', async () => {
    const spy = new Spy();
    const { g, agent, ran } = setup([pay], spy.client(server, { agent: 'ts-mastra-agent' }));
    const first = await agent.generate('Pay invoice 42');
    const req = await server.requestFor(first.runId!, 'call_pay');
    const stop = new AbortController();
    const resuming = g.resume(agent, first.runId!, { signal: stop.signal });
    // waitDecided's long poll of the approval.
    await spy.until((s) => s.method === 'GET' && s.path.startsWith(`/v1/approvals/${req.event_id}?`));
    stop.abort(new Error('the user closed the chat'));
    await assert.rejects(resuming, /the user closed the chat/);
    const rec = await server.decided(req.event_id);
    assert.equal(rec.status, 'cancelled');
    assert.deepEqual(rec.outcome?.decided_by, [agentSubject]);
    assert.deepEqual(ran, []);
  });

  test('resume in a new process: the suspended run lives in Mastra\'s storage; another worker resumes it, once', async () => {
    const db = path.join(dir, 'workers.db');
    const logFile = path.join(dir, 'tool.log');
    await writeFile(logFile, '');
    const worker = path.join(path.dirname(fileURLToPath(import.meta.url)), 'mastra-worker.js');
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token };
    const exec = (mode: string, runId = '') => promisify(execFile)(process.execPath, [worker, mode, db, runId, JSON.stringify([pay]), logFile], { env });

    const started = JSON.parse((await exec('start')).stdout);
    assert.equal(started.finishReason, 'suspended');
    const req = await server.requestFor(started.runId, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
    const b = await exec('resume', started.runId);
    assert.match(JSON.parse(b.stdout).text, /call_pay: "sent 1000 to Globex GmbH"/);
    // Another worker resuming the same run finds nothing suspended and runs nothing.
    assert.deepEqual(JSON.parse((await exec('resume', started.runId)).stdout), { text: null });
    const runs = (await readFile(logFile, 'utf8')).trim().split('\n').filter(Boolean);
    assert.deepEqual(runs.map((l) => JSON.parse(l)), [{ amount: 1000, recipient: 'Globex GmbH' }]);
    assert.equal((await record(req.event_id)).execution?.status, 'succeeded');
  });
});
