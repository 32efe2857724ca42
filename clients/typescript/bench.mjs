// What the client adds to an acquire+release pair: the client against the same SQL through pg
// and pg-pool alone, 8 concurrent tasks, each taking and releasing a key of its own per pair,
// in interleaved rounds on one server; the medians of the rounds and the overhead ratio
// (client time per pair / raw time per pair; the target is <= 1.3).
//
//   node bench.mjs --dsn postgresql://postgres@127.0.0.1:5432/postgres [--seconds 1 --rounds 5]
//
// The client is used as users use it: its own pool, a 30 s lease renewed by its watchdog.
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';

import pg from 'pg';

import { Client } from './dist/index.js';

const { values } = parseArgs({
  options: {
    dsn: { type: 'string' },
    workers: { type: 'string', default: '8' },
    seconds: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '5' },
  },
});
const [workers, seconds, rounds] = [Number(values.workers), Number(values.seconds), Number(values.rounds)];
const POOL = 16;
const ACQUIRE = "SELECT dlock.dlock_acquire($1, $2, '30 seconds')";
const RELEASE = 'SELECT dlock.dlock_release($1, $2)';

/** Pairs per second of `workers` concurrent loops over `pair` for `secs`. */
async function run(secs, pair) {
  const stop = performance.now() + secs * 1000;
  let count = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      const prefix = `bench/${randomUUID().slice(0, 8)}/${w}/`;
      for (let i = 0; performance.now() < stop; i++) {
        await pair(`${prefix}${i}`);
        count += 1;
      }
    }),
  );
  return count / ((performance.now() - started) / 1000);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const client = new Client(values.dsn, { poolSize: POOL });
const raw = new pg.Pool({ connectionString: values.dsn, max: POOL });
const owner = `bench:${randomUUID()}`;
const contenders = {
  client: async (key) => {
    await (await client.lock(key)).release();
  },
  raw: async (key) => {
    await raw.query(ACQUIRE, [key, owner]);
    await raw.query(RELEASE, [key, owner]);
  },
};
for (const pair of Object.values(contenders)) await run(seconds / 2, pair); // warm-up
const rates = { client: [], raw: [] };
for (let r = 0; r < rounds; r++) {
  const names = r % 2 === 0 ? ['client', 'raw'] : ['raw', 'client'];
  for (const name of names) rates[name].push(await run(seconds, contenders[name]));
}
const ratios = rates.raw.map((raw, i) => raw / rates.client[i]);
const ratio = median(ratios);
console.log(
  `typescript, ${workers} tasks: client ${median(rates.client).toFixed(0)} pairs/s, raw ${median(rates.raw).toFixed(0)} pairs/s, ` +
    `overhead ${ratio.toFixed(3)}x (rounds: ${ratios.map((x) => x.toFixed(2)).join(', ')})${ratio <= 1.3 ? '' : '  ABOVE 1.3x'}`,
);
await client.close();
await raw.end();
