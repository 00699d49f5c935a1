// The outcome after execution: whoever claimed a call reports how it ended
// (succeeded or failed), once, by itself in run and in every adapter.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { run as runAgent } from '@openai/agents';
import { generateText, jsonSchema, stepCountIs, tool as aiTool } from 'ai';
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages';
import { tool as lcTool } from '@langchain/core/tools';
import { z } from 'zod';
import { Countersign, CountersignError, maxSummaryBytes, newClaimId, newReportId, summaryText, type ApprovalRecord } from '@countersign/client';
import { gate as aiGate } from '@countersign/client/ai-sdk';
import { gate as lgGate } from '@countersign/client/langgraph';
import { Server, agentSubject, runId } from './harness.js';
import { makeAgent } from './openai-agent.js';
import { scriptedAiModel } from './models.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

const payment = { amount: 1250, recipient: 'Globex GmbH' };
const pay = { id: 'call_pay', name: 'payments_send', arguments: payment };
const here = path.dirname(fileURLToPath(import.meta.url));

/** The record of eventId as it is now. */
async function record(eventId: string): Promise<ApprovalRecord> {
  return (await server.agentClient().approval(eventId)).record;
}

/** The reports sent through a client: each POST …/outcome and its body. */
class Reports {
  readonly bodies: Array<Record<string, unknown>> = [];
  /** Answers lost on the way back: that many reports reach the server, and the client sees a reset. */
  lose = 0;
  readonly fetch: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    if (init?.method === 'POST' && url.pathname.endsWith('/outcome')) {
      this.bodies.push(JSON.parse(String(init.body)));
      if (this.lose > 0) {
        this.lose--;
        const resp = await globalThis.fetch(input, init);
        await resp.body?.cancel();
        throw new TypeError('fetch failed: the connection was reset');
      }
    }
    return globalThis.fetch(input, init);
  };
  client(agent = 'ts-agent'): Countersign {
    return new Countersign({ url: server.url, token: server.token, agent, fetch: this.fetch, retry: { minBackoffMs: 10, maxBackoffMs: 50 } });
  }
}

/** Runs call through cs.run after approving it (the approval decided while run waits). */
async function approvedRun<T>(cs: Countersign, fn: () => T | Promise<T>, call = pay) {
  const run = { id: runId('outcome'), requested_by: 'carol' };
  const running = cs.run(run, call, fn);
  running.catch(() => {});
  const req = await server.requestFor(run.id, call.id);
  await server.alice().decide(req.event_id, { decision: 'approve' });
  return { run, eventId: req.event_id, running };
}

describe('run reports the outcome', () => {
  test('a call that returns is reported succeeded, once, by the claimant; running it again reports nothing more', async () => {
    const reports = new Reports();
    const cs = reports.client();
    const { run, eventId, running } = await approvedRun(cs, () => 'sent');
    const out = await running;
    assert.equal(out.output, 'sent');
    assert.equal(out.outcomeError, undefined);
    const rec = await record(eventId);
    assert.equal(rec.execution?.status, 'succeeded');
    assert.equal(rec.execution?.reported_by, agentSubject);
    assert.equal(rec.execution?.command_id, reports.bodies[0]!.command_id);
    assert.equal(reports.bodies.length, 1);
    const again = await cs.run(run, pay, () => assert.fail('ran twice'));
    assert.equal(again.result.verdict, 'already_executed');
    assert.equal(reports.bodies.length, 1);
    assert.deepEqual((await record(eventId)).execution, rec.execution);
  });

  test('a call that throws is reported failed with the error message, and the error reaches the caller unchanged', async () => {
    const reports = new Reports();
    const boom = new Error('card declined: insufficient funds');
    const { eventId, running } = await approvedRun(reports.client(), () => {
      throw boom;
    });
    await assert.rejects(running, (err: unknown) => err === boom);
    const rec = await record(eventId);
    assert.equal(rec.execution?.status, 'failed');
    assert.equal(rec.execution?.summary, 'card declined: insufficient funds');
    assert.equal(reports.bodies.length, 1);
  });

  test('summarize gives a succeeded report its summary and result hash', async () => {
    const sha = 'ab'.repeat(32);
    const cs = server.agentClient();
    const run = { id: runId('outcome'), requested_by: 'carol' };
    const running = cs.run(run, pay, () => ({ paid: 1250 }), { summarize: (o) => ({ summary: `paid ${o.paid}`, result_sha256: sha }) });
    const req = await server.requestFor(run.id, pay.id);
    await server.alice().decide(req.event_id, { decision: 'approve' });
    await running;
    const x = (await record(req.event_id)).execution;
    assert.deepEqual([x?.status, x?.summary, x?.result_sha256], ['succeeded', 'paid 1250', sha]);
  });

  test('a long error message is cut to 1 KiB of UTF-8 on a character boundary; control characters go', async () => {
    const message = '\u001b[31m' + 'é€😀'.repeat(200);
    const { eventId, running } = await approvedRun(server.agentClient(), () => {
      throw new Error(message);
    });
    await assert.rejects(running);
    const summary = (await record(eventId)).execution!.summary!;
    assert.ok(Buffer.byteLength(summary) <= maxSummaryBytes, `${Buffer.byteLength(summary)} bytes`);
    assert.ok(Buffer.byteLength(summary) > maxSummaryBytes - 4);
    assert.equal(summary, summaryText(message));
    assert.ok(message.replace('\u001b', ' ').startsWith(summary), 'a prefix of the message, whole characters only');
  });

  test('a report whose answer was lost is sent again with the same command id, and is one report', async () => {
    const reports = new Reports();
    reports.lose = 1;
    const { eventId, running } = await approvedRun(reports.client(), () => 'sent');
    const out = await running;
    assert.equal(out.outcomeError, undefined);
    assert.equal(reports.bodies.length, 2);
    assert.equal(reports.bodies[0]!.command_id, reports.bodies[1]!.command_id);
    assert.equal((await record(eventId)).execution?.command_id, reports.bodies[0]!.command_id);
  });

  test('a report the server refuses does not mask the result: it is outcomeError and onReportError hears of it', async () => {
    const told: Array<[string, string]> = [];
    const cs = new Countersign({ url: server.url, token: server.token, agent: 'ts-agent', onReportError: (err, id) => told.push([(err as CountersignError).code, id]) });
    let eventId = '';
    // The function reports by itself first, under another id: run's own report is then a second one.
    const { running, eventId: id } = await approvedRun(cs, async () => {
      await cs.report(eventId, { status: 'succeeded', summary: 'reported by the tool' });
      return 'sent';
    });
    eventId = id;
    const out = await running;
    assert.equal(out.output, 'sent');
    assert.ok(out.outcomeError instanceof CountersignError);
    assert.equal(out.outcomeError.code, 'outcome_reported');
    assert.deepEqual(told, [['outcome_reported', id]]);
    assert.equal((await record(id)).execution?.summary, 'reported by the tool');
  });

  test('a call the policy allows outright has no claim, and nothing is reported', async () => {
    const reports = new Reports();
    const out = await reports.client().run({ id: runId() }, { id: 'c1', name: 'lookup_invoice', arguments: { n: 1 } }, () => 'found');
    assert.equal(out.output, 'found');
    assert.deepEqual(reports.bodies, []);
  });

  test('a runner that dies after its claim leaves the record claimed with no execution', async () => {
    const run = { id: runId('outcome'), requested_by: 'carol' };
    const [r] = await server.agentClient().review(run, [pay]);
    await server.alice().decide(r!.event_id!, { decision: 'approve' });
    const died = await promisify(execFile)(process.execPath, [path.join(here, 'claim-and-exit.js'), run.id, JSON.stringify(pay)], {
      env: { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token },
    }).then(
      () => assert.fail('the runner did not die'),
      (err: { code?: number }) => err.code,
    );
    assert.equal(died, 7);
    const rec = await record(r!.event_id!);
    assert.equal(rec.claim?.by, agentSubject);
    assert.equal(rec.execution, undefined);
  });
});

describe('report, for runners that claim themselves', () => {
  test('exactly once: the same command id again is the same report; another is outcome_reported; before a claim not_claimed; not the claimant not_permitted', async () => {
    // The claimant is other-agent; the development token (an admin, who sees the approval) did not claim.
    const cs = server.otherAgent();
    const [r] = await cs.review({ id: runId('outcome'), requested_by: 'carol' }, [pay]);
    const eventId = r!.event_id!;
    await assert.rejects(cs.report(eventId, { status: 'succeeded' }), { code: 'not_claimed', status: 409 });
    await server.alice().decide(eventId, { decision: 'approve' });
    await cs.claim(eventId, { claimId: newClaimId() });
    await assert.rejects(server.agentClient().report(eventId, { status: 'succeeded' }), { code: 'not_permitted', status: 403 });
    const commandId = newReportId();
    const first = await cs.report(eventId, { status: 'failed', summary: 'timeout after 30 s' }, { commandId });
    const again = await cs.report(eventId, { status: 'failed', summary: 'timeout after 30 s' }, { commandId });
    assert.deepEqual(again.execution, first.execution);
    assert.equal(first.execution?.command_id, commandId);
    await assert.rejects(cs.report(eventId, { status: 'succeeded' }), { code: 'outcome_reported', status: 409 });
    assert.equal((await record(eventId)).execution?.status, 'failed');
  });
});

/** The executions of a run's calls, by call id, once each is decided and ran. */
async function executionOf(runIdValue: string, callId: string) {
  const req = await server.requestFor(runIdValue, callId);
  return (await record(req.event_id)).execution;
}

describe('the adapters report the outcome', () => {
  test('OpenAI Agents SDK: succeeded after an approved call ran; failed when the tool threw', async () => {
    for (const fails of [false, true]) {
      const id = runId('oa-outcome');
      const cs = server.agentClient('ts-openai-agent');
      const { agent, g } = makeAgent(cs, id, [pay], () => {
        if (fails) throw new Error('payments service unavailable');
      });
      const result = await runAgent(agent, 'Pay invoice 42');
      const req = await server.requestFor(id, 'call_pay');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      await g.resume(agent, result.state);
      const x = await executionOf(id, 'call_pay');
      assert.equal(x?.status, fails ? 'failed' : 'succeeded');
      if (fails) assert.equal(x?.summary, 'payments service unavailable');
    }
  });

  test('AI SDK: succeeded after an approved call ran; failed when the tool threw', async () => {
    for (const fails of [false, true]) {
      const id = runId('ai-outcome');
      const g = aiGate(server.agentClient('ts-ai-agent'), { run: { id, requested_by: 'carol' } });
      const tools = g.tools({
        payments_send: aiTool({
          description: 'Send a payment',
          inputSchema: jsonSchema<{ amount: number; recipient: string }>({ type: 'object', properties: { amount: { type: 'number' }, recipient: { type: 'string' } } }),
          execute: async (args) => {
            if (fails) throw new Error('payments service unavailable');
            return `sent ${args.amount}`;
          },
        }),
      });
      const { model } = scriptedAiModel([pay]);
      const generating = generateText({ model, tools, prompt: 'Pay invoice 42', stopWhen: stepCountIs(3) });
      const req = await server.requestFor(id, 'call_pay');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      await generating;
      const x = await executionOf(id, 'call_pay');
      assert.equal(x?.status, fails ? 'failed' : 'succeeded');
      if (fails) assert.equal(x?.summary, 'payments service unavailable');
    }
  });

  test('LangGraph: a guarded tool reports succeeded or failed; resuming the finished thread reports nothing more', async () => {
    for (const fails of [false, true]) {
      const reports = new Reports();
      const g = lgGate(reports.client('ts-langgraph-agent'), { run: { requested_by: 'carol' } });
      const send = lcTool(
        g.guard('payments_send', async (args: { amount: number }) => {
          if (fails) throw new Error('payments service unavailable');
          return `sent ${args.amount}`;
        }),
        { name: 'payments_send', description: 'Send a payment', schema: z.object({ amount: z.number(), recipient: z.string() }) },
      );
      const agent = (state: typeof MessagesAnnotation.State) =>
        HumanMessage.isInstance(state.messages.at(-1)!)
          ? { messages: [new AIMessage({ content: '', tool_calls: [{ id: 'call_pay', name: 'payments_send', args: payment }] })] }
          : { messages: [new AIMessage({ content: state.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => String(m.content)).join('\n') })] };
      const app = new StateGraph(MessagesAnnotation)
        .addNode('agent', agent)
        .addNode('approve', g.node({ tools: 'tools', agent: 'agent', schemas: [send] }), { ends: ['tools', 'agent'] })
        .addNode('tools', new ToolNode([send]))
        .addEdge(START, 'agent')
        .addConditionalEdges('agent', (s) => ((s.messages.at(-1) as AIMessage).tool_calls?.length ? 'approve' : END), ['approve', END])
        .addEdge('tools', 'agent')
        .compile({ checkpointer: new MemorySaver() });
      const config = { configurable: { thread_id: runId('lg-outcome') } };
      await app.invoke({ messages: [new HumanMessage('Pay invoice 42')] }, config);
      const req = await server.requestFor(config.configurable.thread_id, 'call_pay');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      await app.invoke(await g.resume(app, config), config);
      const x = await executionOf(config.configurable.thread_id, 'call_pay');
      assert.equal(x?.status, fails ? 'failed' : 'succeeded');
      if (fails) assert.equal(x?.summary, 'payments service unavailable');
      assert.equal(reports.bodies.length, 1);
    }
  });
});
