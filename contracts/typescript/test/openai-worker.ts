// A worker process of the resume-on-any-worker test. "suspend" starts a run
// and writes its serialized RunState; "resume" builds everything afresh,
// reads only that string, and resumes the run from Countersign's decision.
import { readFileSync, writeFileSync } from 'node:fs';
import { run } from '@openai/agents';
import { Countersign } from '@countersign/client';
import { makeAgent, fileLog } from './openai-agent.js';

const [mode, stateFile, runId, callsJSON, logFile] = process.argv.slice(2);
const cs = new Countersign({ agent: 'ts-openai-agent' }); // COUNTERSIGN_URL, COUNTERSIGN_TOKEN
const { agent, g } = makeAgent(cs, runId!, JSON.parse(callsJSON!), fileLog(logFile!));
if (mode === 'suspend') {
  const result = await run(agent, 'Pay invoice 42');
  writeFileSync(stateFile!, result.state.toString());
  process.stdout.write(JSON.stringify({ interruptions: result.interruptions.map((i) => i.name) }));
} else {
  const result = await g.resume(agent, readFileSync(stateFile!, 'utf8'));
  process.stdout.write(JSON.stringify({ finalOutput: result.finalOutput }));
}
