// A runner that dies after its claim: it runs one approved call through
// Countersign.run, whose function ends the process before it returns, so
// nothing reports how the call ended.
import { Countersign } from '@countersign/client';

const [runId, callJSON] = process.argv.slice(2);
const cs = new Countersign({ agent: 'ts-agent' }); // COUNTERSIGN_URL, COUNTERSIGN_TOKEN
await cs.run({ id: runId!, requested_by: 'carol' }, JSON.parse(callJSON!), () => process.exit(7));
