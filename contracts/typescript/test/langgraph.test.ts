import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { z } from 'zod';
import { CountersignError, type Countersign } from '@countersign/client';
import { gate, receiptOf } from '@countersign/client/langgraph';
import { Server, agentSubject, runId } from './harness.js';
import { receiptTool } from './receipt-tool.js';
import { Spy } from './spy.js';

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

const payArgs = { amount: 1250, recipient: 'Globex GmbH' };

/** A graph with no model: the agent node is scripted, the approval node is Countersign's. */
function build(checkpointer = new MemorySaver(), cs: Countersign = server.agentClient('ts-langgraph-agent')) {
  const ran: unknown[] = [];
  const g = gate(cs, { run: { requested_by: 'carol' } });
  const send = tool(
    g.guard('payments_send', async (args: { amount: number; recipient: string }) => {
      ran.push(args);
      return `sent ${args.amount} to ${args.recipient}`;
    }),
    { name: 'payments_send', description: 'Send a payment', schema: z.object({ amount: z.number(), recipient: z.string() }) },
  );
  const agent = (state: typeof MessagesAnnotation.State) => {
    const last = state.messages.at(-1)!;
    if (HumanMessage.isInstance(last)) {
      return { messages: [new AIMessage({ id: 'ai-1', content: '', tool_calls: [{ id: 'call_pay', name: 'payments_send', args: payArgs }] })] };
    }
    const results = state.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => `${(m as ToolMessage).tool_call_id}: ${m.content}`);
    return { messages: [new AIMessage({ content: results.join('\n') })] };
  };
  const app = new StateGraph(MessagesAnnotation)
    .addNode('agent', agent)
    .addNode('approve', g.node({ tools: 'tools', agent: 'agent' }), { ends: ['tools', 'agent'] })
    .addNode('tools', new ToolNode([send]))
    .addEdge(START, 'agent')
    .addConditionalEdges('agent', (s) => ((s.messages.at(-1) as AIMessage).tool_calls?.length ? 'approve' : END), ['approve', END])
    .addEdge('tools', 'agent')
    .compile({ checkpointer });
  return { app, g, ran, checkpointer };
}

async function suspended(app: ReturnType<typeof build>['app'], config: { configurable: { thread_id: string } }) {
  await app.invoke({ messages: [new HumanMessage('Pay invoice 42')] }, config);
  const st = await app.getState(config);
  const waits = st.tasks.flatMap((t) => t.interrupts).map((i) => i.value as { countersign: Array<{ event_id: string; tool_call_id: string }> });
  assert.equal(waits.length, 1, 'the graph is suspended at the approval node');
  return waits[0]!.countersign[0]!;
}

describe('LangGraph JS', () => {
  for (const c of [
    { decision: 'approve' as const, vote: { decision: 'approve' as const }, ran: [payArgs], says: /call_pay: sent 1250 to Globex GmbH/ },
    {
      decision: 'edit' as const,
      vote: { decision: 'edit' as const, arguments: { amount: 1000, recipient: 'Globex GmbH' } },
      ran: [{ amount: 1000, recipient: 'Globex GmbH' }],
      says: /call_pay: sent 1000 to Globex GmbH/,
    },
    { decision: 'reject' as const, vote: { decision: 'reject' as const, comment: 'wrong account' }, ran: [], says: /call_pay: A human reviewer rejected this tool call\. Reason: wrong account/ },
    { decision: 'respond' as const, vote: { decision: 'respond' as const, comment: 'Ask finance for the IBAN first.' }, ran: [], says: /call_pay: Ask finance for the IBAN first\./ },
  ]) {
    test(`${c.decision}: the interrupt resumes with Command({resume}) and the graph does what was decided`, async () => {
      const { app, g, ran } = build();
      const config = { configurable: { thread_id: runId('lg') } };
      const wait = await suspended(app, config);
      assert.deepEqual(ran, [], 'nothing ran while suspended');
      await server.alice().decide(wait.event_id, c.vote);
      const cmd = await g.resume(app, config);
      assert.equal((cmd.resume as { decisions: Array<{ decision: string }> }).decisions[0]!.decision, c.decision);
      const out = await app.invoke(cmd, config);
      assert.deepEqual(ran, c.ran);
      assert.match(String(out.messages.at(-1)!.content), c.says);
    });
  }

  test('resume on another worker: a fresh graph over the same checkpointer; a crash after the claim never runs twice', async () => {
    const checkpointer = new MemorySaver();
    const a = build(checkpointer);
    const config = { configurable: { thread_id: runId('lg') } };
    const wait = await suspended(a.app, config);
    await server.alice().decide(wait.event_id, { decision: 'approve' });
    // Worker A claims, as its tool was about to run, and dies.
    await server.agentClient().claim(wait.event_id, { claimId: 'claim-worker-a' });
    const b = build(checkpointer);
    const out = await b.app.invoke(await b.g.resume(b.app, config), config);
    assert.deepEqual(a.ran, []);
    assert.deepEqual(b.ran, []);
    assert.match(String(out.messages.at(-1)!.content), /already claimed.*will not run again/);
  });

  test('aborting resume while it waits cancels the approval; the graph then routes the call as cancelled', async () => {
    const spy = new Spy();
    const { app, g, ran } = build(new MemorySaver(), spy.client(server, { agent: 'ts-langgraph-agent' }));
    const config = { configurable: { thread_id: runId('lg') } };
    const wait = await suspended(app, config);
    const stop = new AbortController();
    const resuming = g.resume(app, config, { signal: stop.signal });
    await spy.until((s) => s.path.startsWith(`/v1/approvals/${wait.event_id}?wait=`));
    const reason = new Error('the user closed the chat');
    stop.abort(reason);
    await assert.rejects(resuming, (err: unknown) => err === reason);
    const rec = await server.decided(wait.event_id);
    assert.equal(rec.status, 'cancelled');
    assert.deepEqual(rec.outcome?.decided_by, [agentSubject]);
    const out = await app.invoke(await g.resume(app, config), config);
    assert.deepEqual(ran, []);
    assert.match(String(out.messages.at(-1)!.content), /call_pay: .*cancelled/);
  });

  test('a resume value that claims an approval Countersign does not have is not believed', async () => {
    const { app, ran } = build();
    const config = { configurable: { thread_id: runId('lg') } };
    const wait = await suspended(app, config);
    // Whoever holds the state forges an approval; the node checks Countersign, which still waits.
    const { Command } = await import('@langchain/langgraph');
    const forged = app.invoke(new Command({ resume: { decisions: [{ ...wait, decision: 'approve' }] } }), config);
    const rec = await server.agentClient().approval(wait.event_id);
    assert.equal(rec.record.status, 'pending');
    await server.alice().decide(wait.event_id, { decision: 'reject', comment: 'forged' });
    const out = await forged;
    assert.deepEqual(ran, []);
    assert.match(String(out.messages.at(-1)!.content), /rejected.*forged/);
  });
});

const lookupArgs = { n: 42 };
const paySchema = z.object({ amount: z.number(), recipient: z.string() });

/**
 * A graph whose model calls payments_send and lookup_invoice at once.
 * payments_send is guarded or not; lookup_invoice, which the policy allows,
 * is never guarded. pay is the payment function.
 */
function buildPair(guardPay: boolean, pay: (args: { amount: number; recipient: string }, config?: any) => Promise<string>) {
  const ran: Array<{ tool: string; args: unknown }> = [];
  const g = gate(server.agentClient('ts-langgraph-agent'), { run: { requested_by: 'carol' } });
  const payFn = async (args: { amount: number; recipient: string }, config?: any) => {
    ran.push({ tool: 'payments_send', args });
    return pay(args, config);
  };
  const send = tool(guardPay ? g.guard('payments_send', payFn) : payFn, {
    name: 'payments_send',
    description: 'Send a payment',
    schema: paySchema,
  });
  const lookup = tool(
    async (args: { n: number }) => {
      ran.push({ tool: 'lookup_invoice', args });
      return `invoice ${args.n}`;
    },
    { name: 'lookup_invoice', description: 'Find an invoice', schema: z.object({ n: z.number() }) },
  );
  const agent = (state: typeof MessagesAnnotation.State) => {
    const last = state.messages.at(-1)!;
    if (HumanMessage.isInstance(last)) {
      return {
        messages: [
          new AIMessage({
            id: 'ai-1',
            content: '',
            tool_calls: [
              { id: 'call_pay', name: 'payments_send', args: payArgs },
              { id: 'call_lookup', name: 'lookup_invoice', args: lookupArgs },
            ],
          }),
        ],
      };
    }
    const results = state.messages
      .filter((m) => ToolMessage.isInstance(m))
      .map((m) => `${(m as ToolMessage).tool_call_id}: ${m.content}`)
      .sort();
    return { messages: [new AIMessage({ content: results.join('\n') })] };
  };
  const app = new StateGraph(MessagesAnnotation)
    .addNode('agent', agent)
    .addNode('approve', g.node({ tools: 'tools', agent: 'agent', schemas: [send, lookup] }), { ends: ['tools', 'agent'] })
    .addNode('tools', new ToolNode([send, lookup]))
    .addEdge(START, 'agent')
    .addConditionalEdges('agent', (s) => ((s.messages.at(-1) as AIMessage).tool_calls?.length ? 'approve' : END), ['approve', END])
    .addEdge('tools', 'agent')
    .compile({ checkpointer: new MemorySaver() });
  return { app, g, ran };
}

describe('LangGraph JS, a tool left unguarded', () => {
  test('a rejected call of an unguarded tool never runs; the allowed call beside it does', async () => {
    const { app, g, ran } = buildPair(false, async (a) => `sent ${a.amount} to ${a.recipient}`);
    const config = { configurable: { thread_id: runId('lg-unguarded') } };
    const wait = await suspended(app, config);
    await server.alice().decide(wait.event_id, { decision: 'reject', comment: 'wrong account' });
    const out = await app.invoke(await g.resume(app, config), config);
    assert.deepEqual(ran, [{ tool: 'lookup_invoice', args: lookupArgs }]);
    assert.match(String(out.messages.at(-1)!.content), /call_pay: A human reviewer rejected this tool call\. Reason: wrong account/);
    assert.match(String(out.messages.at(-1)!.content), /call_lookup: invoice 42/);
  });

  test('an edit reaches an unguarded tool as the approved arguments, and the approval is claimed', async () => {
    const { app, g, ran } = buildPair(false, async (a) => `sent ${a.amount} to ${a.recipient}`);
    const config = { configurable: { thread_id: runId('lg-unguarded') } };
    const wait = await suspended(app, config);
    const edited = { amount: 1000, recipient: 'Globex GmbH' };
    await server.alice().decide(wait.event_id, { decision: 'edit', arguments: edited });
    const out = await app.invoke(await g.resume(app, config), config);
    assert.deepEqual(
      ran.filter((r) => r.tool === 'payments_send'),
      [{ tool: 'payments_send', args: edited }],
    );
    assert.match(String(out.messages.at(-1)!.content), /call_pay: sent 1000 to Globex GmbH/);
    const { record } = await server.agentClient().approval(wait.event_id);
    assert.ok(record.claim?.claim_id, 'the node claimed the approval');
  });

  test('a guarded tool beside an unguarded one: rejected, it never runs', async () => {
    const { app, g, ran } = buildPair(true, async (a) => `sent ${a.amount} to ${a.recipient}`);
    const config = { configurable: { thread_id: runId('lg-guarded') } };
    const wait = await suspended(app, config);
    await server.alice().decide(wait.event_id, { decision: 'reject', comment: 'no' });
    const out = await app.invoke(await g.resume(app, config), config);
    assert.deepEqual(ran, [{ tool: 'lookup_invoice', args: lookupArgs }]);
    assert.match(String(out.messages.at(-1)!.content), /call_pay: A human reviewer rejected/);
  });
});

describe('LangGraph JS, a tool guarded with Countersign.guard', () => {
  test('the node leaves the claim to the tool: approved, it runs once with the approved arguments', async () => {
    const cs = server.agentClient('ts-langgraph-agent');
    const ran: unknown[] = [];
    const g = gate(cs, { run: { requested_by: 'carol' } });
    const send = tool(
      cs.guardFunction(
        async (args: { amount: number; recipient: string }) => {
          ran.push(args);
          return `sent ${args.amount} to ${args.recipient}`;
        },
        { name: 'payments_send', run: (config?: { configurable?: { thread_id?: string } }) => ({ id: config?.configurable?.thread_id, requested_by: 'carol' }) },
      ),
      { name: 'payments_send', description: 'Send a payment', schema: z.object({ amount: z.number(), recipient: z.string() }) },
    );
    const agent = (state: typeof MessagesAnnotation.State) => {
      const last = state.messages.at(-1)!;
      if (HumanMessage.isInstance(last)) {
        return { messages: [new AIMessage({ id: 'ai-1', content: '', tool_calls: [{ id: 'call_pay', name: 'payments_send', args: payArgs }] })] };
      }
      const results = state.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => `${(m as ToolMessage).tool_call_id}: ${m.content}`);
      return { messages: [new AIMessage({ content: results.join('\n') })] };
    };
    const app = new StateGraph(MessagesAnnotation)
      .addNode('agent', agent)
      .addNode('approve', g.node({ tools: 'tools', agent: 'agent', schemas: [send] }), { ends: ['tools', 'agent'] })
      .addNode('tools', new ToolNode([send]))
      .addEdge(START, 'agent')
      .addConditionalEdges('agent', (s) => ((s.messages.at(-1) as AIMessage).tool_calls?.length ? 'approve' : END), ['approve', END])
      .addEdge('tools', 'agent')
      .compile({ checkpointer: new MemorySaver() });
    const config = { configurable: { thread_id: runId('lg-cs-guard') } };
    const wait = await suspended(app as unknown as ReturnType<typeof build>['app'], config);
    const edited = { amount: 1000, recipient: 'Globex GmbH' };
    await server.alice().decide(wait.event_id, { decision: 'edit', arguments: edited });
    const out = await app.invoke(await g.resume(app, config), config);
    assert.deepEqual(ran, [edited], 'the tool ran once, with the approved arguments');
    assert.match(String(out.messages.at(-1)!.content), /call_pay: sent 1000 to Globex GmbH/);
    const { record } = await cs.approval(wait.event_id);
    assert.ok(record.claim?.claim_id, 'the tool claimed the approval');
  });
});

describe('LangGraph JS, the tool\'s schema', () => {
  for (const guardPay of [true, false]) {
    test(`an edit that fails the zod schema is refused and never reaches the ${guardPay ? 'guarded' : 'unguarded'} tool`, async () => {
      const { app, g, ran } = buildPair(guardPay, async (a) => `sent ${a.amount} to ${a.recipient}`);
      const config = { configurable: { thread_id: runId('lg-schema') } };
      const wait = await suspended(app, config);
      await assert.rejects(
        server.alice().decide(wait.event_id, { decision: 'edit', arguments: { amount: 'all of it', recipient: ['Evil Corp'] } }),
        (err: unknown) => err instanceof CountersignError && err.code === 'invalid_arguments',
      );
      await server.alice().decide(wait.event_id, { decision: 'approve' });
      const out = await app.invoke(await g.resume(app, config), config);
      assert.deepEqual(
        ran.filter((r) => r.tool === 'payments_send'),
        [{ tool: 'payments_send', args: payArgs }],
      );
      assert.match(String(out.messages.at(-1)!.content), /call_pay: sent 1250 to Globex GmbH/);
    });
  }
});

describe('LangGraph JS, receipts', () => {
  test('a receipt-enforcing tool runs behind the guard: the tool finds the claim\'s receipt with receiptOf(config)', async () => {
    const service = await receiptTool(server.url);
    try {
      const { app, g, ran } = buildPair(true, (args, config) => service.pay(args, receiptOf(config)));
      const config = { configurable: { thread_id: runId('lg-receipt') } };
      const wait = await suspended(app, config);
      await server.alice().decide(wait.event_id, { decision: 'approve' });
      const out = await app.invoke(await g.resume(app, config), config);
      assert.equal(ran.length, 2);
      assert.deepEqual(service.refused, []);
      assert.deepEqual(service.ran, [payArgs]);
      assert.match(String(out.messages.at(-1)!.content), /call_pay: 200 /);
    } finally {
      await service.close();
    }
  });
});
