// A worker process of the ADK resume test, over ADK's DatabaseSessionService
// (MikroORM's libSQL driver, a file every worker opens). "start" creates the
// session and runs the agent until it pauses for a confirmation, then exits;
// "resume" builds everything afresh and resumes the session with g.resume.
import { appendFileSync } from 'node:fs';
import { DatabaseSessionService } from '@google/adk';
import { LibSqlDriver } from '@mikro-orm/libsql';
import { Countersign } from '@countersign/client';
import { appName, collect, finalText, makeAdkAgent, userId } from './adk-agent.js';

const [mode, dbFile, sessionId, callsJSON, logFile] = process.argv.slice(2);
const sessionService = new DatabaseSessionService({ driver: LibSqlDriver, dbName: dbFile! });
const cs = new Countersign({ agent: 'ts-adk-agent' }); // COUNTERSIGN_URL, COUNTERSIGN_TOKEN
const { g, runner } = makeAdkAgent(cs, sessionService, JSON.parse(callsJSON!), (r) => appendFileSync(logFile!, JSON.stringify(r.args) + '\n'));

if (mode === 'start') {
  await sessionService.createSession({ appName, userId, sessionId });
  const events = await collect(runner.runAsync({ userId, sessionId: sessionId!, newMessage: { role: 'user', parts: [{ text: 'Pay invoice 42' }] } }));
  const paused = events.flatMap((e) => e.longRunningToolIds ?? []).length;
  process.stdout.write(JSON.stringify({ paused }));
} else {
  const events = await collect(g.resume(runner, { userId, sessionId: sessionId! }));
  process.stdout.write(JSON.stringify({ text: finalText(events) }));
}
process.exit(0);
