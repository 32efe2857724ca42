// A worker pool limited by a dlock semaphore: 8 workers, at most 3 at work at any moment.
//
// Each worker takes one of the 3 permits of 'examples:render-farm' (a shared lease with
// max_holders => 3), renews it while a job runs long, and gives it back. The permits live in
// PostgreSQL, so the limit holds across processes and machines. Connects with the usual
// PG* environment variables (PGHOST, PGPORT, PGUSER, PGDATABASE) or DATABASE_URL.
//
// Exits 1 if more than 3 workers ever worked at once, or a job was lost.
import { randomUUID } from "node:crypto";
import pg from "pg";

const KEY = "examples:render-farm";
const PERMITS = 3;
const WORKERS = 8;
const JOBS_PER_WORKER = 5;

let running = 0;
let mostAtOnce = 0;
let done = 0;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function worker(i) {
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  const owner = `worker-${i}-${randomUUID()}`; // a lease belongs to its owner string
  try {
    for (let job = 0; job < JOBS_PER_WORKER; job++) {
      // Wait up to 30 s for a permit; the lease lasts 10 s unless renewed.
      const { rows } = await client.query(
        "SELECT dlock.dlock_acquire_shared($1, $2, $3, $4, max_holders => $5) AS fence",
        [KEY, owner, "10 seconds", "30 seconds", PERMITS],
      );
      if (rows[0].fence === null) throw new Error(`${owner}: no permit within 30 s`);
      running += 1;
      mostAtOnce = Math.max(mostAtOnce, running);
      try {
        await sleep(50); // the job
        // A long job keeps its permit: renew before the ttl runs out.
        const renewed = await client.query("SELECT dlock.dlock_renew($1, $2, $3) AS until", [KEY, owner, "10 seconds"]);
        if (renewed.rows[0].until === null) throw new Error(`${owner}: lost the permit`);
        await sleep(50);
      } finally {
        running -= 1;
        done += 1;
        await client.query("SELECT dlock.dlock_release($1, $2)", [KEY, owner]);
      }
    }
  } finally {
    await client.end();
  }
}

await Promise.all(Array.from({ length: WORKERS }, (_, i) => worker(i)));
console.log(`node semaphore: ${done} jobs, at most ${mostAtOnce} at once (limit ${PERMITS})`);
if (mostAtOnce > PERMITS || done !== WORKERS * JOBS_PER_WORKER) process.exit(1);
