// The Claude Agent SDK adapter against the real SDK: query() runs the Claude
// Code process, whose model is a scripted one behind a local endpoint that
// speaks Anthropic's Messages API (test/anthropic-model.ts).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createSdkMcpServer, query, tool as sdkTool } from '@anthropic-ai/claude-agent-sdk';
import { z } from 'zod';
import { CountersignError, type Countersign } from '@countersign/client';
import { gate, receiptOf, toolName } from '@countersign/client/claude-agent-sdk';
import { Server, runId } from './harness.js';
import { AnthropicModel, type ScriptedUse } from './anthropic-model.js';

let server: Server;
let home: string;
before(async () => {
  server = await Server.start();
  home = await mkdtemp(path.join(tmpdir(), 'countersign-claude-'));
});
after(async () => {
  await server?.stop();
});

const payArgs = { amount: 1250, recipient: 'Globex GmbH' };
const pay: ScriptedUse = { id: 'toolu_pay', name: 'mcp__billing__payments_send', input: payArgs };
const lookup: ScriptedUse = { id: 'toolu_lookup', name: 'mcp__billing__lookup_invoice', input: { n: 42 } };

function setup(uses: ScriptedUse[], cs: Countersign = server.agentClient('ts-claude-agent')) {
  const id = runId('claude');
  const ran: Array<{ tool: string; args: unknown; receipt?: string }> = [];
  const g = gate(cs, { run: { id, requested_by: 'carol' } });
  const tools = [
    g.tool('payments_send', 'Send a payment', { amount: z.number(), recipient: z.string() }, async (args, extra) => {
      ran.push({ tool: 'payments_send', args, receipt: receiptOf(extra) });
      return { content: [{ type: 'text' as const, text: `sent ${args.amount} to ${args.recipient}` }] };
    }),
    g.tool('lookup_invoice', 'Find an invoice', { n: z.number() }, async (args) => {
      ran.push({ tool: 'lookup_invoice', args });
      return { content: [{ type: 'text' as const, text: `invoice ${args.n}: 1250 EUR` }] };
    }),
  ];
  return { id, ran, g, ...agent(g, uses, tools) };
}

/** A query() over the scripted model with the gate's callback and hooks; it resolves to the run's final text. */
function agent(g: ReturnType<typeof gate>, uses: ScriptedUse[], tools: any[]) {
  const billing = createSdkMcpServer({ name: 'billing', tools });
  const model = new AnthropicModel(uses);
  const go = async (): Promise<string> => {
    await model.start();
    try {
      let text = '';
      const q = query({
        prompt: 'Pay invoice 42',
        options: {
          mcpServers: { billing },
          canUseTool: g.canUseTool,
          hooks: g.hooks,
          env: model.env(home),
          model: 'claude-sonnet-4-5',
          cwd: home,
          tools: [],
          settingSources: [],
          persistSession: false,
        },
      });
      for await (const m of q) if (m.type === 'result') text = m.subtype === 'success' ? m.result : `error: ${m.subtype}`;
      return text;
    } finally {
      await model.stop();
    }
  };
  return { go, model };
}

async function execution(runIdValue: string, callId: string) {
  const req = await server.requestFor(runIdValue, callId);
  return (await server.agentClient().approval(req.event_id)).record.execution;
}

describe('Claude Agent SDK', () => {
  test('toolName drops an MCP tool\'s server prefix', () => {
    assert.equal(toolName('mcp__billing__payments_send'), 'payments_send');
    assert.equal(toolName('mcp__my_server__lookup_invoice'), 'lookup_invoice');
    assert.equal(toolName('Bash'), 'Bash');
  });

  test('approve: an allowed call runs at once, a gated one after approval, once, and reports succeeded', async () => {
    const { id, ran, go } = setup([pay, lookup]);
    const running = go();
    const req = await server.requestFor(id, 'toolu_pay');
    assert.equal(req.tool_call?.name, 'payments_send');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const text = await running;
    assert.deepEqual(ran.map((r) => r.tool).sort(), ["lookup_invoice", "payments_send"]);
    assert.equal(ran.filter((r) => r.tool === 'payments_send').length, 1);
    assert.ok(ran.find((r) => r.tool === 'payments_send')!.receipt, 'the claimed call has its receipt');
    assert.match(text, /toolu_pay: sent 1250 to Globex GmbH/);
    assert.match(text, /toolu_lookup: invoice 42: 1250 EUR/);
    const rec = (await server.agentClient().approval((await server.requestFor(id, 'toolu_pay')).event_id)).record;
    assert.equal(rec.execution?.status, 'succeeded', JSON.stringify(rec));
  });

  test('reject: the call never runs and the model sees the reviewer\'s reason as the tool result', async () => {
    const { id, ran, go } = setup([pay]);
    const running = go();
    const req = await server.requestFor(id, 'toolu_pay');
    await server.alice().decide(req.event_id, { decision: 'reject', comment: 'wrong account' });
    const text = await running;
    assert.deepEqual(ran, []);
    assert.match(text, /toolu_pay: A human reviewer rejected this tool call\. Reason: wrong account/);
  });

  test('edit: an edit that fails the tool\'s zod schema is refused; a valid one runs with the edited arguments', async () => {
    const { id, ran, go } = setup([pay]);
    const running = go();
    const req = await server.requestFor(id, 'toolu_pay');
    await assert.rejects(
      server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 'all of it', recipient: ['Evil Corp'] } }),
      (err: unknown) => err instanceof CountersignError && err.code === 'invalid_arguments',
    );
    await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
    const text = await running;
    assert.deepEqual(ran.map((r) => r.args), [{ amount: 1000, recipient: 'Globex GmbH' }]);
    assert.match(text, /toolu_pay: sent 1000 to Globex GmbH/);
  });

  test('parallel calls: two gated calls of one message are each asked, decided and run (or not) on their own', async () => {
    const second: ScriptedUse = { id: 'toolu_pay2', name: 'mcp__billing__payments_send', input: { amount: 99, recipient: 'Initech' } };
    const { id, ran, go } = setup([pay, second]);
    const running = go();
    // The SDK asks for one call's permission at a time: each is decided as it comes.
    const a = await server.requestFor(id, 'toolu_pay');
    await server.alice().decide(a.event_id, { decision: 'approve' });
    const b = await server.requestFor(id, 'toolu_pay2');
    await server.alice().decide(b.event_id, { decision: 'reject', comment: 'not this one' });
    const text = await running;
    assert.deepEqual(ran.map((r) => r.args), [payArgs]);
    assert.match(text, /toolu_pay: sent 1250/);
    assert.match(text, /toolu_pay2: .*not this one/);
  });

  test('a tool not made with g.tool: canUseTool claims and hands on the approved arguments; the hooks report succeeded or failed', async () => {
    for (const fails of [false, true]) {
      const id = runId('claude-plain');
      const ran: unknown[] = [];
      const g = gate(server.agentClient('ts-claude-agent'), {
        run: { id, requested_by: 'carol' },
        toolSchemas: { payments_send: { type: 'object', properties: { amount: { type: 'number' }, recipient: { type: 'string' } }, required: ['amount', 'recipient'] } },
      });
      const plain = sdkTool('payments_send', 'Send a payment', { amount: z.number(), recipient: z.string() }, async (args) => {
        ran.push(args);
        if (fails) throw new Error('payments service unavailable');
        return { content: [{ type: 'text' as const, text: `sent ${args.amount}` }] };
      });
      const { go } = agent(g, [pay], [plain]);
      const running = go();
      const req = await server.requestFor(id, 'toolu_pay');
      await server.alice().decide(req.event_id, { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } });
      await running;
      assert.deepEqual(ran, [{ amount: 1000, recipient: 'Globex GmbH' }]);
      const rec = (await server.agentClient().approval(req.event_id)).record;
      assert.ok(rec.claim, 'claimed before the tool ran');
      assert.equal(rec.execution?.status, fails ? 'failed' : 'succeeded');
      if (fails) assert.match(rec.execution?.summary ?? '', /payments service unavailable/);
    }
  });

  test('a g.tool handler that throws is reported failed with its message', async () => {
    const id = runId('claude-fail');
    const g = gate(server.agentClient('ts-claude-agent'), { run: { id, requested_by: 'carol' } });
    const failing = g.tool('payments_send', 'Send a payment', { amount: z.number(), recipient: z.string() }, async () => {
      throw new Error('card declined');
    });
    const { go } = agent(g, [pay], [failing]);
    const running = go();
    const req = await server.requestFor(id, 'toolu_pay');
    await server.alice().decide(req.event_id, { decision: 'approve' });
    await running;
    const x = await execution(id, 'toolu_pay');
    assert.deepEqual([x?.status, x?.summary], ['failed', 'card declined']);
  });

  test('the server restarts while canUseTool waits: the wait goes on and the approved call runs once', async () => {
    const { id, ran, go } = setup([pay], server.agentClient('ts-claude-agent'));
    const running = go();
    const req = await server.requestFor(id, 'toolu_pay');
    await server.restart();
    await server.alice().decide(req.event_id, { decision: 'approve' });
    const text = await running;
    assert.equal(ran.length, 1);
    assert.match(text, /toolu_pay: sent 1250/);
  });
});
