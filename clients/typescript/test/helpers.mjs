// What the tests share: the test server (DLOCK_TEST_DSN; tests/scripts/clients.sh test starts
// one), clients closed after each test, keys no other test uses, and polling of a condition.
import { randomUUID } from 'node:crypto';
import { after } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import { Client } from '../dist/index.js';

function need(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is not set: run tests/scripts/clients.sh test (it starts a server)`);
    process.exit(2);
  }
  return value;
}

export const dsn = need('DLOCK_TEST_DSN');
export const pgbouncerDsn = () => need('DLOCK_TEST_PGBOUNCER_DSN');

const made = [];
after(async () => {
  for (const c of made) await c.close().catch(() => undefined);
});

/** A client of the test server, closed when the file's tests are done. */
export function client(options = {}, connection = dsn) {
  const c = new Client(connection, options);
  made.push(c);
  return c;
}

/** Keys of one test alone: `key('a')`. */
export function keys(test) {
  const prefix = `ts/${test}/${randomUUID().slice(0, 8)}`;
  return (name = 'k') => `${prefix}/${name}`;
}

/** An admin session; closed with the file's tests. */
export async function admin() {
  const session = new pg.Client({ connectionString: dsn });
  await session.connect();
  after(() => session.end());
  return session;
}

/** Polls `condition` until it is true (a generous limit, never a measurement). */
export async function eventually(condition, what = 'the condition', timeout = 10_000) {
  const deadline = performance.now() + timeout;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error(`${what} did not hold within ${timeout} ms`);
    await sleep(20);
  }
}

/** Whether `signal` aborts within `ms`. */
export function aborts(signal, ms) {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve(true);
    }, { once: true });
  });
}
