// The child process of the conformance suite (conformance/README.md, "The child process
// protocol"): it holds one lease for the runner, which stops and continues it with signals.
import { createInterface } from 'node:readline';

import { Client } from 'dlock-client';

import { classify, waitLost } from './adapter.mjs';

const client = new Client(process.env.DLOCK_CONFORMANCE_CHILD_DSN, { pooler: process.env.DLOCK_CONFORMANCE_CHILD_POOLER ?? 'session' });
let lease = null;
const say = (line) => process.stdout.write(`${line}\n`);
say(`ready ${process.pid}`);
for await (const line of createInterface({ input: process.stdin })) {
  const words = line.split(' ');
  try {
    if (words[0] === 'lock' && words.length === 3) {
      lease = await client.lock(words[1], { ttl: Number(words[2]) });
      say(`ok ${lease.fence}`);
    } else if (words[0] === 'wait_lost' && words.length === 2 && lease !== null) {
      say(`ok ${await waitLost(lease.lost, Number(words[1]))}`);
    } else if (line === 'release' && lease !== null) {
      say(`ok ${await lease.release()}`);
    } else if (line === 'quit') {
      say('ok bye');
      break;
    } else {
      say('error Protocol -');
    }
  } catch (e) {
    const [kind, sqlstate] = classify(e) ?? ['Unexpected', null];
    say(`error ${kind} ${sqlstate ?? '-'}`);
  }
}
await client.close();
process.exit(0);
