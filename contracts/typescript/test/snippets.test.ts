// The README's snippets are files under examples/snippets: this test runs
// each against a real server (a human approves through the API while the
// snippet waits) and checks that the package README and docs/using.md embed them verbatim.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages';
import { Server, pkgDir, runId } from './harness.js';
import { ScriptedAgentsModel, scriptedAiModel } from './models.js';

let server: Server;
before(async () => {
  // The snippets run under the policy make run applies, as a reader runs them.
  server = await Server.start({ policy: await readFile(path.join(pkgDir, '../../deploy/policy.yaml'), 'utf8') });
  process.env.COUNTERSIGN_URL = server.url;
  process.env.COUNTERSIGN_TOKEN = server.token;
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
