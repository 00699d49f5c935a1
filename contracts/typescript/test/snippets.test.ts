// The README's snippets are files under examples/snippets: this test runs
// each against a real server (a human approves through the API while the
// snippet waits) and checks that the package README and docs/using.md embed them verbatim;
// so are the lines docs/adk.md, docs/claude-agent-sdk.md and docs/mastra.md
// (and the package README) give, each run with its framework's own runner
// over a scripted model, and the Express tool docs/receipts.md gives.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { InMemorySessionService } from '@google/adk';
import express from 'express';
import { Countersign, newClaimId } from '@countersign/client';
import { Server, pkgDir, runId, snippetServer } from './harness.js';
import { ScriptedAgentsModel, scriptedAiModel } from './models.js';
import { ScriptedAdkModel } from './adk-model.js';
import { AnthropicModel } from './anthropic-model.js';

let server: Server;
before(async () => {
  server = await snippetServer();
});
after(async () => {
  await server?.stop();
});

const args = { amount: 1250, recipient: 'Globex GmbH' };
const call = { id: 'call_pay', name: 'payments_send', arguments: args };
const snippets = ['openai-agents', 'ai-sdk', 'langgraph'];

function provide(): { paid: unknown[]; id: string } {
  const paid: unknown[] = [];
  const id = runId('snippet');
  const g = globalThis as Record<string, unknown>;
  g.runId = id;
  g.user = 'carol';
  g.parameters = z.object({ amount: z.number(), recipient: z.string() });
  g.sendPayment = async (a: unknown) => {
    paid.push(a);
    return 'paid';
  };
  g.openaiModel = new ScriptedAgentsModel([call]);
  g.aiModel = scriptedAiModel([call]).model;
  g.buildGraph = ({ approve, tools }: { approve: any; tools: any[] }) =>
    new StateGraph(MessagesAnnotation)
      .addNode('agent', (s: typeof MessagesAnnotation.State) =>
        HumanMessage.isInstance(s.messages.at(-1)!)
          ? { messages: [new AIMessage({ content: '', tool_calls: [{ id: call.id, name: call.name, args }] })] }
          : { messages: [new AIMessage({ content: s.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => m.content).join('\n') })] },
      )
      .addNode('approve', approve, { ends: ['tools', 'agent'] })
      .addNode('tools', new ToolNode(tools))
      .addEdge(START, 'agent')
      .addConditionalEdges('agent', (s) => ((s.messages.at(-1) as AIMessage).tool_calls?.length ? 'approve' : END), ['approve', END])
      .addEdge('tools', 'agent')
      .compile({ checkpointer: new MemorySaver() });
  return { paid, id };
}

describe('README snippets', () => {
  for (const name of snippets) {
    test(`${name}: runs, waits for the human, pays once`, async () => {
      const { paid, id } = provide();
      const file = pathToFileURL(path.join(pkgDir, 'build-test/examples/snippets', name + '.js')).href;
      const running = import(file);
      const req = await server.requestFor(id, 'call_pay');
      assert.equal(req.run.agent, 'billing-bot');
      assert.equal(req.policy.rule, 'payments', 'the shipped policy holds payments_send by its payments rule');
      await server.alice().decide(req.event_id, { decision: 'approve' });
      await running;
      assert.deepEqual(paid, [args]);
    });
  }

  for (const readme of ['README.md', '../../docs/using.md']) {
    test(`${readme} embeds exactly the snippet files`, async () => {
      const text = await readFile(path.join(pkgDir, readme), 'utf8');
      const blocks = [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
      for (const name of snippets) {
        const src = await readFile(path.join(pkgDir, 'examples/snippets', name + '.ts'), 'utf8');
        assert.ok(src.trim().split('\n').length <= 10, `${name}.ts is longer than 10 lines`);
        assert.ok(blocks.includes(src), `${readme} does not embed examples/snippets/${name}.ts verbatim`);
      }
    });
  }
});

/** Runs the snippet file name: it must wait for the human, then pay once. */
async function runsAndPaysOnce(name: string, paid: unknown[], run: string, callId: string) {
  const file = pathToFileURL(path.join(pkgDir, 'build-test/examples/snippets', name + '.js')).href;
  const running = import(file);
  const req = await server.requestFor(run, callId);
  assert.equal(req.run.agent, 'billing-bot');
  assert.equal(req.policy.rule, 'payments', 'the shipped policy holds payments_send by its payments rule');
  assert.deepEqual(paid, [], 'paid before the human decided');
  await server.alice().decide(req.event_id, { decision: 'approve' });
  await running;
  assert.deepEqual(paid, [args]);
}

describe('docs snippets of the adapters', () => {
  test('docs/adk.md: runs, waits for the human, pays once', async () => {
    const { paid } = provide();
    const sessionService = new InMemorySessionService();
    const sessionId = runId('adk-snippet');
    await sessionService.createSession({ appName: 'billing', userId: 'carol', sessionId });
    Object.assign(globalThis, {
      model: new ScriptedAdkModel([call]), sessionService, userId: 'carol', sessionId,
      newMessage: { role: 'user', parts: [{ text: 'Pay invoice 42' }] },
    });
    // The run id is the ADK session's.
    await runsAndPaysOnce('adk', paid, sessionId, call.id);
  });

  test('docs/claude-agent-sdk.md: runs, waits for the human, pays once', async () => {
    const { paid, id } = provide();
    // The SDK's tool handlers answer with an MCP tool result.
    const g = globalThis as Record<string, unknown>;
    g.sendPayment = async (a: unknown) => {
      paid.push(a);
      return { content: [{ type: 'text', text: 'paid' }] };
    };
    // query() runs the Claude Code process with this process's environment:
    // its model is a scripted one behind a local Messages API endpoint.
    const model = new AnthropicModel([{ id: 'toolu_pay', name: 'mcp__billing__payments_send', input: args }]);
    await model.start();
    const saved = { ...process.env };
    Object.assign(process.env, model.env(await mkdtemp(path.join(tmpdir(), 'countersign-claude-snippet-'))));
    try {
      await runsAndPaysOnce('claude-agent-sdk', paid, id, 'toolu_pay');
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
      await model.stop();
    }
  });

  test('docs/receipts.md: the Express tool runs a payment only with its receipt, once', async () => {
    const ran: unknown[] = [];
    const app = express();
    Object.assign(globalThis, {
      app, express,
      sendPayment: async (a: unknown) => {
        ran.push(a);
        return { sent: true };
      },
    });
    // The issuer's address in the lines is this server's.
    const realFetch = globalThis.fetch;
    globalThis.fetch = (input, init) =>
      realFetch(String(input instanceof Request ? input.url : input).replace('https://countersign.example.com', server.url), init);
    const listener = app.listen(0, '127.0.0.1');
    try {
      await import(pathToFileURL(path.join(pkgDir, 'build-test/examples/snippets/receipts.js')).href);
      if (!listener.listening) await once(listener, 'listening');
      const tool = `http://127.0.0.1:${(listener.address() as AddressInfo).port}/payments.send`;
      const cs = new Countersign({ url: server.url, token: server.token, agent: 'billing-bot' });
      const body = { amount: 1250, recipient: 'Globex GmbH' };
      const [r] = await cs.review({ id: runId('receipts-snippet'), requested_by: 'carol' }, [{ id: 'pay-1', name: 'payments.send', arguments: body }]);
      assert.equal(r!.verdict, 'pending');
      await server.alice().decide(r!.event_id!, { decision: 'approve' });
      const receipt = (await cs.claim(r!.event_id!, { claimId: newClaimId() })).claim!.receipt!;
      const post = async (headers: Record<string, string>, payment: unknown) => {
        const res = await realFetch(tool, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(payment) });
        return res.status;
      };
      assert.equal(await post({}, body), 401, 'no receipt');
      assert.equal(await post({ 'countersign-receipt': receipt }, { ...body, amount: 12500 }), 403, 'other arguments');
      assert.equal(await post({ 'countersign-receipt': receipt }, body), 200);
      assert.equal(await post({ 'countersign-receipt': receipt }, body), 409, 'used once');
      assert.deepEqual(ran, [body]);
    } finally {
      globalThis.fetch = realFetch;
      listener.close();
    }
  });

  // Mastra's snippet runs on Node 22 (test/node22/snippets.test.ts).
  const embedded = [
    ['adk', '../../docs/adk.md'], ['adk', 'README.md'],
    ['claude-agent-sdk', '../../docs/claude-agent-sdk.md'], ['claude-agent-sdk', 'README.md'],
    ['mastra', '../../docs/mastra.md'], ['mastra', 'README.md'],
    ['receipts', '../../docs/receipts.md'],
  ];
  for (const [name, doc] of embedded) {
    test(`${doc} embeds exactly examples/snippets/${name}.ts`, async () => {
      const text = await readFile(path.join(pkgDir, doc), 'utf8');
      const src = await readFile(path.join(pkgDir, 'examples/snippets', name + '.ts'), 'utf8');
      assert.ok([...text.matchAll(/```ts\n([\s\S]*?)```/g)].some((m) => m[1] === src), `${doc} does not embed examples/snippets/${name}.ts verbatim`);
    });
  }
});
