// A worker process of the Mastra resume test. "start" runs the agent until
// it suspends and prints the run id; "resume" builds everything afresh over
// the same storage file and resumes the run with g.resume.
import { appendFileSync } from 'node:fs';
import { Countersign } from '@countersign/client';
import { makeMastraAgent } from './mastra-agent.js';

const [mode, dbFile, runIdArg, callsJSON, logFile] = process.argv.slice(2);
const cs = new Countersign({ agent: 'ts-mastra-agent' }); // COUNTERSIGN_URL, COUNTERSIGN_TOKEN
const { g, agent } = makeMastraAgent(cs, dbFile!, JSON.parse(callsJSON!), (r) => appendFileSync(logFile!, JSON.stringify(r.args) + '\n'));

if (mode === 'start') {
  const out = await agent.generate('Pay invoice 42');
  process.stdout.write(JSON.stringify({ finishReason: out.finishReason, runId: out.runId }));
} else {
  const out = await g.resume(agent, runIdArg!);
  process.stdout.write(JSON.stringify({ text: out?.text ?? null }));
}
process.exit(0);
