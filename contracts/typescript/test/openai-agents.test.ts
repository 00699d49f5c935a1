import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Agent, run, RunState } from '@openai/agents';
import { z } from 'zod';
import { CountersignError, newClaimId } from '@countersign/client';
import { gate, receiptOf } from '@countersign/client/openai-agents';
import { Server, agentSubject, runId } from './harness.js';
import { makeAgent } from './openai-agent.js';
import { receiptTool } from './receipt-tool.js';
import { Spy, inLongPoll } from './spy.js';
import { ScriptedAgentsModel, type ScriptedCall } from './models.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

const pay = { id: 'call_pay', name: 'payments_send', arguments: { amount: 1250, recipient: 'Globex GmbH' } };
const lookup = { id: 'call_lookup', name: 'lookup_invoice', arguments: { n: 42 } };

function setup(calls: ScriptedCall[] = [pay]) {
  const id = runId('oa');
  const log: string[] = [];
  const cs = server.agentClient('ts-openai-agent');
  return { id, log, cs, ...makeAgent(cs, id, calls, (e) => log.push(e)) };
}

describe('OpenAI Agents SDK', () => {
  test('a call the policy allows runs without interrupting the run', async () => {
    const { agent, log } = setup([lookup]);
    const result = await run(agent, 'Find invoice 42');
    assert.equal(result.interruptions.length, 0);
    assert.deepEqual(log.map((l) => JSON.parse(l)), [{ tool: 'lookup_invoice', args: { n: 42 } }]);
    assert.equal(result.finalOutput, 'call_lookup: invoice 42: 1250 EUR');
  });

  test('a gated call interrupts the run, and runs once after approval', async () => {
    const { agent, g, id, log } = setup([pay, lookup]);
    let result = await run(agent, 'Pay invoice 42');
    assert.deepEqual(result.interruptions.map((i) => i.name), ['payments_send']);
    assert.deepEqual(log.map((l) => JSON.parse(l).tool), ['lookup_invoice'], 'the allowed call ran, the gated one waits');
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'approve', comment: 'ok' });
    result = await g.resume(agent, result.state);
    assert.equal(log.filter((l) => JSON.parse(l).tool === 'payments_send').length, 1);
    assert.match(String(result.finalOutput), /call_pay: sent 1250 to Globex GmbH/);
  });

  test('a rejection reaches the model as the tool result', async () => {
    const { agent, g, id, log, model } = setup();
    const result = await run(agent, 'Pay invoice 42');
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'reject', comment: 'wrong account' });
    const final = await g.resume(agent, result.state);
    assert.deepEqual(log, []);
    assert.match(String(final.finalOutput), /call_pay: A human reviewer rejected this tool call\. Reason: wrong account/);
    const seen = JSON.stringify(model.requests.at(-1)!.input);
    assert.match(seen, /wrong account/);
  });

  test('an edit runs with the edited arguments', async () => {
    const { agent, g, id, log } = setup();
    const result = await run(agent, 'Pay invoice 42');
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
    const final = await g.resume(agent, result.state);
    assert.deepEqual(log.map((l) => JSON.parse(l)), [{ tool: 'payments_send', args: { amount: 1000, recipient: 'Globex GmbH' } }]);
    assert.match(String(final.finalOutput), /sent 1000/);
  });

  test('a worker that crashed between claim and run: resuming elsewhere does not run the call again', async () => {
    const { agent, id, cs } = setup();
    const result = await run(agent, 'Pay invoice 42');
    const serialized = result.state.toString();
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    // Worker A claimed (its tool was about to run) and died.
    await cs.claim(req.event_id, { claimId: newClaimId() });
    // Worker B: fresh objects, only the serialized state.
    const b = setup();
    const bAgent = makeAgent(server.agentClient('ts-openai-agent'), id, [pay], (e) => b.log.push(e));
    const final = await bAgent.g.resume(bAgent.agent, serialized);
    assert.deepEqual(b.log, []);
    assert.match(String(final.finalOutput), /already claimed.*will not run again/);
    void agent;
  });

  test('resume on any worker: A suspends and exits, B resumes from the serialized RunState, the tool runs once', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'oa-workers-'));
    const stateFile = path.join(dir, 'state.json');
    const logFile = path.join(dir, 'tool.log');
    await writeFile(logFile, '');
    const id = runId('oa-workers');
    const worker = path.join(path.dirname(fileURLToPath(import.meta.url)), 'openai-worker.js');
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token };
    const exec = (mode: string) =>
      promisify(execFile)(process.execPath, [worker, mode, stateFile, id, JSON.stringify([pay]), logFile], { env });

    const a = await exec('suspend'); // worker A exits after writing the state
    assert.deepEqual(JSON.parse(a.stdout), { interruptions: ['payments_send'] });
    assert.ok((await readFile(stateFile, 'utf8')).length > 0);
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'approve' });

    const b = await exec('resume');
    assert.match(JSON.parse(b.stdout).finalOutput, /call_pay: sent 1250 to Globex GmbH/);
    // A third worker resuming the same state does not run it again.
    const c = await exec('resume');
    assert.match(JSON.parse(c.stdout).finalOutput, /already claimed.*will not run again/);
    const runs = (await readFile(logFile, 'utf8')).trim().split('\n').filter(Boolean);
    assert.deepEqual(runs.map((l) => JSON.parse(l)), [{ tool: 'payments_send', args: pay.arguments }]);
    const record = (await server.agentClient().approval(req.event_id)).record;
    assert.ok(record.claim?.claim_id, 'the approval was claimed');
  });

  test('aborting resume while it waits for a decision cancels the approval; the tool never runs', async () => {
    const spy = new Spy();
    const id = runId('oa');
    const log: string[] = [];
    const { agent, g } = makeAgent(spy.client(server, { agent: 'ts-openai-agent' }), id, [pay], (e) => log.push(e));
    const result = await run(agent, 'Pay invoice 42');
    const req = await server.requestFor(id, 'call_pay');
    const stop = new AbortController();
    const resuming = g.resume(agent, result.state.toString(), { signal: stop.signal });
    await spy.until(inLongPoll); // settle waits for the decision
    const reason = new Error('the user closed the chat');
    stop.abort(reason);
    await assert.rejects(resuming, (err: unknown) => err === reason);
    const rec = await server.decided(req.event_id);
    assert.equal(rec.status, 'cancelled');
    assert.deepEqual(rec.outcome?.decided_by, [agentSubject]);
    // Resuming the state again (no abort) settles it as cancelled: the tool does not run.
    const final = await g.resume(agent, result.state.toString());
    assert.deepEqual(log, []);
    assert.match(String(final.finalOutput), /call_pay: .*cancelled/);
  });

  test('a serialized state restores into a RunState with the same interruption', async () => {
    const { agent } = setup();
    const result = await run(agent, 'Pay invoice 42');
    const restored = await RunState.fromString(agent, result.state.toString());
    assert.deepEqual(restored.getInterruptions().map((i) => i.name), ['payments_send']);
  });
});

describe('OpenAI Agents SDK, the tool\'s schema', () => {
  test('an edit that fails the tool\'s parameters is refused and never reaches the tool', async () => {
    const { agent, g, id, log } = setup();
    const result = await run(agent, 'Pay invoice 42');
    const req = await server.requestFor(id, 'call_pay');
    await assert.rejects(
      server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 'all of it', recipient: ['Evil Corp'] } }),
      (err: unknown) => err instanceof CountersignError && err.code === 'invalid_arguments',
    );
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const final = await g.resume(agent, result.state);
    assert.deepEqual(log.map((l) => JSON.parse(l)), [{ tool: 'payments_send', args: pay.arguments }]);
    assert.match(String(final.finalOutput), /sent 1250/);
  });
});

describe('OpenAI Agents SDK, run context', () => {
  test('a run named from the run context: settle finds the context of a serialized state', async () => {
    const id = runId('oa-ctx');
    const ran: unknown[] = [];
    const g = gate(server.agentClient('ts-openai-agent'), { run: (ctx) => ({ id: (ctx?.context as { runId: string }).runId }) });
    const agent = new Agent<{ runId: string }>({
      name: 'billing',
      instructions: 'Pay invoices.',
      model: new ScriptedAgentsModel([pay]),
      tools: [
        g.tool({
          name: 'payments_send',
          description: 'Send a payment',
          parameters: z.object({ amount: z.number(), recipient: z.string() }),
          execute: async (args) => {
            ran.push(args);
            return `sent ${args.amount}`;
          },
        }),
      ],
    });
    const result = await run(agent, 'Pay invoice 42', { context: { runId: id } });
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const final = await g.resume(agent, result.state.toString());
    assert.deepEqual(ran, [pay.arguments]);
    assert.match(String(final.finalOutput), /sent 1250/);
  });
});

describe('OpenAI Agents SDK, receipts', () => {
  test('a receipt-enforcing tool runs behind g.tool: execute finds the claim\'s receipt with receiptOf(details)', async () => {
    const service = await receiptTool(server.url);
    try {
      const id = runId('oa-receipt');
      const g = gate(server.agentClient('ts-openai-agent'), { run: { id } });
      const agent = new Agent({
        name: 'billing',
        instructions: 'Pay invoices.',
        model: new ScriptedAgentsModel([pay]),
        tools: [
          g.tool({
            name: 'payments_send',
            description: 'Send a payment',
            parameters: z.object({ amount: z.number(), recipient: z.string() }),
            execute: (args, _ctx, details) => service.pay(args, receiptOf(details)),
          }),
        ],
      });
      const result = await run(agent, 'Pay invoice 42');
      const req = await server.requestFor(id, 'call_pay');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      const final = await g.resume(agent, result.state);
      assert.deepEqual(service.refused, []);
      assert.deepEqual(service.ran, [pay.arguments]);
      assert.match(String(final.finalOutput), /call_pay: 200 /);
    } finally {
      await service.close();
    }
  });
});
