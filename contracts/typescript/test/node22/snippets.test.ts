// The Mastra lines of docs/mastra.md (and the package README), the file
// examples/snippets/mastra.ts, run as written on Node 22 against a real
// server under the policy make run applies: Mastra's Agent over a scripted
// AI SDK model and libSQL storage, the run suspended while a human decides
// and resumed by g.resume.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { LibSQLStore } from '@mastra/libsql';
import { z } from 'zod';
import { Server, pkgDir, snippetServer } from '../harness.js';
import { streamingModel } from './mastra-agent.js';

let server: Server;
before(async () => {
  server = await snippetServer();
});
after(async () => {
  await server?.stop();
});

test('docs/mastra.md: runs, suspends while the human decides, pays once', async () => {
  const args = { amount: 1250, recipient: 'Globex GmbH' };
  const callId = 'call_pay_mastra_snippet';
  const paid: unknown[] = [];
  const dir = await mkdtemp(path.join(tmpdir(), 'countersign-mastra-snippet-'));
  Object.assign(globalThis, {
    user: 'carol',
    inputSchema: z.object({ amount: z.number(), recipient: z.string() }),
    sendPayment: async (a: unknown) => {
      paid.push(a);
      return 'paid';
    },
    model: streamingModel([{ id: callId, name: 'payments_send', arguments: args }]),
    storage: new LibSQLStore({ id: 'countersign-snippet', url: `file:${path.join(dir, 'mastra.db')}` }),
  });
  const running = import(pathToFileURL(path.join(pkgDir, 'build-test/examples/snippets/mastra.js')).href);
  // The run id is Mastra's: the request is found by its agent and call.
  const req = await server.requested((r) => r.run.agent === 'billing-bot' && r.tool_call?.id === callId);
  assert.equal(req.policy.rule, 'payments', 'the shipped policy holds payments_send by its payments rule');
  assert.deepEqual(paid, [], 'paid before the human decided');
  await server.alice().decide(req.event_id, { decision: 'approve' });
  await running;
  assert.deepEqual(paid, [args]);
});
