import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { generateText, jsonSchema, stepCountIs, tool, type ModelMessage } from 'ai';
import { z } from 'zod';
import { CountersignError, type Countersign } from '@countersign/client';
import { gate, receiptOf } from '@countersign/client/ai-sdk';
import { Server, agentSubject, runId } from './harness.js';
import { scriptedAiModel, type ScriptedCall } from './models.js';
import { receiptTool } from './receipt-tool.js';
import { Spy, inLongPoll } from './spy.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

const pay: ScriptedCall = { id: 'call_pay', name: 'payments_send', arguments: { amount: 1250, recipient: 'Globex GmbH' } };
const lookup: ScriptedCall = { id: 'call_lookup', name: 'lookup_invoice', arguments: { n: 42 } };

function setup(calls: ScriptedCall[], cs: Countersign = server.agentClient('ts-ai-agent')) {
  const id = runId('ai');
  const ran: Array<{ tool: string; args: unknown }> = [];
  const g = gate(cs, { run: { id, requested_by: 'carol' } });
  const tools = g.tools({
    payments_send: tool({
      description: 'Send a payment',
      inputSchema: jsonSchema<{ amount: number; recipient: string }>({
        type: 'object',
        properties: { amount: { type: 'number' }, recipient: { type: 'string' } },
        required: ['amount', 'recipient'],
      }),
      execute: async (args) => {
        ran.push({ tool: 'payments_send', args });
        return `sent ${args.amount} to ${args.recipient}`;
      },
    }),
    lookup_invoice: tool({
      description: 'Find an invoice',
      inputSchema: jsonSchema<{ n: number }>({ type: 'object', properties: { n: { type: 'number' } }, required: ['n'] }),
      execute: async (args) => {
        ran.push({ tool: 'lookup_invoice', args });
        return `invoice ${args.n}`;
      },
    }),
  });
  const { model, prompts } = scriptedAiModel(calls);
  return { id, ran, g, tools, model, prompts };
}

describe('Vercel AI SDK, blocking tools', () => {
  test('an allowed call runs; a gated one waits inside execute and runs once after approval', async () => {
    const { id, ran, tools, model } = setup([lookup, pay]);
    const generating = generateText({ model, tools, prompt: 'Pay invoice 42', stopWhen: stepCountIs(3) });
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const result = await generating;
    assert.deepEqual(ran.map((r) => r.tool).sort(), ['lookup_invoice', 'payments_send']);
    assert.match(result.text, /call_pay: "sent 1250 to Globex GmbH"/);
    assert.match(result.text, /call_lookup: "invoice 42"/);
  });

  test('a rejection reaches the model as the tool result', async () => {
    const { id, ran, tools, model } = setup([pay]);
    const generating = generateText({ model, tools, prompt: 'Pay invoice 42', stopWhen: stepCountIs(3) });
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'reject', comment: 'wrong account' });
    const result = await generating;
    assert.deepEqual(ran, []);
    assert.match(result.text, /call_pay: "A human reviewer rejected this tool call\. Reason: wrong account"/);
  });
});

describe('Vercel AI SDK, abort', () => {
  test('aborting generateText while a gated call waits cancels its approval; the tool never runs', async () => {
    const { id, ran, tools, model } = setup([pay]);
    const stop = new AbortController();
    const generating = generateText({ model, tools, prompt: 'Pay invoice 42', stopWhen: stepCountIs(3), abortSignal: stop.signal });
    const req = await server.requestFor(id, 'call_pay');
    const reason = new Error('the user closed the chat');
    stop.abort(reason);
    await assert.rejects(generating);
    const rec = await server.decided(req.event_id);
    assert.equal(rec.status, 'cancelled');
    assert.deepEqual(rec.outcome?.decided_by, [agentSubject]);
    assert.deepEqual(ran, []);
  });

  test('aborting approvalResponses cancels the approvals it waits on', async () => {
    const spy = new Spy();
    const { id, g, tools, model } = setup([pay], spy.client(server, { agent: 'ts-ai-agent' }));
    const first = await generateText({ model, tools, prompt: 'Pay invoice 42', toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
    const req = await server.requestFor(id, 'call_pay');
    const stop = new AbortController();
    const waiting = g.approvalResponses(first.content, { signal: stop.signal });
    await spy.until(inLongPoll);
    stop.abort(new Error('stop'));
    await assert.rejects(waiting, /stop/);
    assert.equal((await server.decided(req.event_id)).status, 'cancelled');
  });
});

describe('Vercel AI SDK, toolApproval', () => {
  test('a gated call suspends as a tool-approval-request; after an edit it runs once with the edited arguments', async () => {
    const { id, ran, g, tools, model } = setup([pay, lookup]);
    const messages: ModelMessage[] = [{ role: 'user', content: 'Pay invoice 42' }];
    const first = await generateText({ model, tools, messages, toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
    const requests = first.content.filter((p) => p.type === 'tool-approval-request');
    assert.equal(requests.length, 1);
    assert.deepEqual(ran.map((r) => r.tool), ['lookup_invoice'], 'the allowed call ran, the gated one is suspended');
    messages.push(...first.response.messages);

    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
    const responses = await g.approvalResponses(first.content);
    assert.ok(responses);
    messages.push(responses);
    const second = await generateText({ model, tools, messages, toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
    assert.deepEqual(ran.filter((r) => r.tool === 'payments_send'), [{ tool: 'payments_send', args: { amount: 1000, recipient: 'Globex GmbH' } }]);
    assert.match(second.text, /call_pay: "sent 1000 to Globex GmbH"/);
  });

  test('a rejection is answered as a denied approval with the reason', async () => {
    const { id, ran, g, tools, model } = setup([pay]);
    const messages: ModelMessage[] = [{ role: 'user', content: 'Pay invoice 42' }];
    const first = await generateText({ model, tools, messages, toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
    messages.push(...first.response.messages);
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'reject', comment: 'wrong account' });
    messages.push((await g.approvalResponses(first.content))!);
    const second = await generateText({ model, tools, messages, toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
    assert.deepEqual(ran, []);
    assert.match(second.text, /call_pay: denied: A human reviewer rejected this tool call\. Reason: wrong account/);
  });

  test('a call the policy denies is denied by the hook without asking anyone', async () => {
    const { g, tools, model } = setup([{ id: 'call_sh', name: 'shell.exec', arguments: { cmd: 'ls' } }]);
    const status = await g.toolApproval({ toolCall: { toolCallId: 'call_sh', toolName: 'shell.exec', input: { cmd: 'ls' } } });
    assert.deepEqual(status, { type: 'denied', reason: 'Agents may not run shell commands.' });
    void tools;
    void model;
  });
});

/** An edit the tool's schema refuses: amount is a number, recipient a string. */
const invalidEdit = { amount: 'all of it', recipient: ['Evil Corp'] };

/** The vote refusal of an edit that fails the tool's schema. */
const refusedAsInvalid = (err: unknown) => err instanceof CountersignError && err.code === 'invalid_arguments';

describe('Vercel AI SDK, the tool\'s schema', () => {
  for (const kind of ['zod', 'JSON Schema'] as const) {
    test(`an edit that fails the tool's ${kind} schema is refused and never reaches the tool`, async () => {
      const id = runId('ai-schema');
      const ran: unknown[] = [];
      const inputSchema =
        kind === 'zod'
          ? z.object({ amount: z.number(), recipient: z.string() })
          : jsonSchema<{ amount: number; recipient: string }>({
              type: 'object',
              properties: { amount: { type: 'number' }, recipient: { type: 'string' } },
              required: ['amount', 'recipient'],
            });
      const g = gate(server.agentClient('ts-ai-agent'), { run: { id } });
      const tools = g.tools({
        payments_send: tool({
          description: 'Send a payment',
          inputSchema,
          execute: async (args: { amount: number; recipient: string }) => {
            ran.push(args);
            return `sent ${args.amount} to ${args.recipient}`;
          },
        }),
      });
      const { model } = scriptedAiModel([pay]);
      const generating = generateText({ model, tools, prompt: 'Pay invoice 42', stopWhen: stepCountIs(3) });
      const req = await server.requestFor(id, 'call_pay');
      await assert.rejects(server.alice().decide(req.event_id, { decision: 'edit', arguments: invalidEdit }), refusedAsInvalid);
      await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
      const result = await generating;
      assert.deepEqual(ran, [{ amount: 1000, recipient: 'Globex GmbH' }]);
      assert.match(result.text, /sent 1000 to Globex GmbH/);
    });
  }

  test('toolApproval sends the schema too: the suspended call refuses an invalid edit', async () => {
    const { id, ran, g, tools, model } = setup([pay]);
    await generateText({ model, tools, prompt: 'Pay invoice 42', toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
    const req = await server.requestFor(id, 'call_pay');
    await assert.rejects(server.alice().decide(req.event_id, { decision: 'edit', arguments: invalidEdit }), refusedAsInvalid);
    assert.equal((await server.agentClient().approval(req.event_id)).record.status, 'pending');
    assert.deepEqual(ran, []);
  });
});

describe('Vercel AI SDK, resume from stored messages', () => {
  test('a suspended run resumes in a new process from [prompt, ...response.messages]; the tool runs once', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'ai-workers-'));
    const file = path.join(dir, 'messages.json');
    const logFile = path.join(dir, 'tool.log');
    await writeFile(logFile, '');
    const id = runId('ai-workers');
    const worker = path.join(path.dirname(fileURLToPath(import.meta.url)), 'ai-worker.js');
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token };
    const exec = (mode: string) => promisify(execFile)(process.execPath, [worker, mode, file, id, JSON.stringify([pay]), logFile], { env });

    const a = await exec('suspend');
    assert.deepEqual(JSON.parse(a.stdout), { requests: 1 });
    const stored = JSON.parse(await readFile(file, 'utf8'));
    assert.ok(stored.some((m: { role: string }) => m.role === 'assistant'), 'the stored conversation holds the response messages');
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });

    const b = await exec('resume');
    assert.match(JSON.parse(b.stdout).text, /call_pay: "sent 1000 to Globex GmbH"/);
    // Another worker resuming the same stored conversation does not run it again.
    const c = await exec('resume');
    assert.match(JSON.parse(c.stdout).text, /already claimed.*will not run again/);
    const runs = (await readFile(logFile, 'utf8')).trim().split('\n').filter(Boolean);
    assert.deepEqual(runs.map((l) => JSON.parse(l)), [{ amount: 1000, recipient: 'Globex GmbH' }]);
  });

  test('requests already answered in the messages are not reviewed again', async () => {
    const { id, g, tools, model } = setup([pay]);
    const messages: ModelMessage[] = [{ role: 'user', content: 'Pay invoice 42' }];
    const first = await generateText({ model, tools, messages, toolApproval: g.toolApproval, stopWhen: stepCountIs(3) });
    messages.push(...first.response.messages);
    const req = await server.requestFor(id, 'call_pay');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    messages.push((await g.approvalResponses(messages))!);
    assert.equal(await g.approvalResponses(messages), undefined);
  });
});

describe('Vercel AI SDK, receipts', () => {
  test('a receipt-enforcing tool runs behind the adapter: execute finds the claim\'s receipt with receiptOf(options)', async () => {
    const service = await receiptTool(server.url);
    try {
      const id = runId('ai-receipt');
      const g = gate(server.agentClient('ts-ai-agent'), { run: { id } });
      const tools = g.tools({
        payments_send: tool({
          description: 'Send a payment',
          inputSchema: z.object({ amount: z.number(), recipient: z.string() }),
          execute: (args, options) => service.pay(args, receiptOf(options)),
        }),
      });
      const { model } = scriptedAiModel([pay]);
      const generating = generateText({ model, tools, prompt: 'Pay invoice 42', stopWhen: stepCountIs(3) });
      const req = await server.requestFor(id, 'call_pay');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      const result = await generating;
      assert.deepEqual(service.refused, []);
      assert.deepEqual(service.ran, [pay.arguments]);
      assert.match(result.text, /call_pay: "200 /);
    } finally {
      await service.close();
    }
  });
});
