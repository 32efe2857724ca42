// Waits: no pooled connection held, arrival order, wake-up by notification and expiry, the
// listener's loss, timeouts, waiting for a free key, elections observed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { NotAcquiredError } from '../dist/index.js';
import { admin, client, dsn, eventually, keys } from './helpers.mjs';

test('a wait ends NotAcquired when its time runs out', async () => {
  const key = keys('timeout');
  const [a, b] = [client(), client()];
  const held = await a.lock(key());
  const started = performance.now();
  await assert.rejects(() => b.lock(key(), { wait: 400 }), (e) => e instanceof NotAcquiredError && e.waited);
  const took = performance.now() - started;
  assert.ok(took > 350 && took < 5000, `${took} ms`);
  await held.release();
});

test('waiters hold no pooled connection and are granted in arrival order, woken by notifications', async () => {
  const key = keys('order');
  const session = await admin();
  const app = `ts-order-${Math.random().toString(16).slice(2, 8)}`;
  const url = new URL(dsn);
  url.searchParams.set('application_name', app);
  const holder = client();
  const a = client({ poolSize: 2 }, url.toString());
  const blocker = await holder.lock(key(), { ttl: 60_000 });
  const order = [];
  const waiters = [];
  for (let i = 0; i < 12; i++) {
    const worker = a.withOwner(`w${i}-${Math.random()}`);
    waiters.push(worker.withLock(key(), { wait: 30_000 }, async () => order.push(i)));
    // The next arrives only once this one is lined up (white box: the client's local line).
    await eventually(() => a.home.waits.lines.get(key())?.users === i + 1);
  }
  await eventually(async () => (await session.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%dlock_watch%'", [app])).rows[0].n === 1);
  const started = performance.now();
  await (await a.lock(key('other'))).release();
  assert.ok(performance.now() - started < 5000, 'the pool of 2 is free while 12 wait');
  const connections = (await session.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [app])).rows[0].n;
  assert.ok(connections <= 3, `${connections} connections: the pool and one listener at most`);
  await sleep(200);
  const released = performance.now();
  await blocker.release();
  await Promise.all(waiters);
  assert.deepEqual(order, [...Array(12).keys()]);
  assert.ok(performance.now() - released < 5000);
});

test('the blocking lease expiring wakes a waiter; a lost listener is replaced', async () => {
  const key = keys('expiry');
  const session = await admin();
  const app = `ts-listener-${Math.random().toString(16).slice(2, 8)}`;
  const url = new URL(dsn);
  url.searchParams.set('application_name', app);
  const [a, b] = [client(), client({}, url.toString())];
  const held = await a.lock(key(), { ttl: 1000, watchdog: false });
  const started = performance.now();
  assert.ok((await b.lock(key(), { wait: 20_000 })).fence > held.fence);
  assert.ok(performance.now() - started < 5000);
  const blocker = await a.lock(key('again'), { ttl: 60_000 });
  const waiter = b.lock(key('again'), { wait: 30_000 });
  const listener = "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%dlock_watch%'";
  await eventually(async () => (await session.query(listener, [app])).rows.length === 1);
  const old = (await session.query(listener, [app])).rows[0].pid;
  await session.query('SELECT pg_terminate_backend($1)', [old]);
  await eventually(async () => {
    const rows = (await session.query(listener, [app])).rows;
    return rows.length === 1 && rows[0].pid !== old;
  }, 'a new listener watches the key');
  await blocker.release();
  assert.ok((await waiter).fence > blocker.fence);
});

test('waitFree answers when a key is free, without taking it', async () => {
  const key = keys('free');
  const [a, b] = [client(), client()];
  assert.equal(await b.waitFree(key(), 0), true);
  const held = await a.lock(key());
  assert.equal(await b.waitFree(key(), 200), false);
  const waiting = b.waitFree(key(), 20_000);
  await sleep(100);
  await held.release();
  assert.equal(await waiting, true);
  assert.notEqual(await a.tryLock(key()), null);
});

test('an election: one leader, growing terms, observed with for await', async () => {
  const key = keys('election');
  const [a, b, watcher] = [client(), client(), client()];
  const changes = watcher.election(key()).observe();
  const seen = [];
  const observing = (async () => {
    for await (const leader of changes) {
      seen.push(leader?.info ?? null);
      if (seen.at(-1) === null && seen.includes('b')) break;
    }
  })();
  await eventually(() => seen.length === 1); // nobody leads yet
  const lead = await a.election(key(), { ttl: 10_000 }).campaign('a');
  assert.equal((await b.election(key()).leader()).term, lead.term);
  await assert.rejects(() => b.election(key(), { wait: 0 }).campaign('b'), NotAcquiredError);
  const next = b.election(key()).campaign('b');
  await eventually(() => seen.includes('a'));
  assert.equal(await lead.resign(), true);
  const leadB = await next;
  assert.ok(leadB.term > lead.term);
  await eventually(() => seen.at(-1) === 'b');
  await leadB.resign();
  await observing;
  assert.equal(seen[0], null);
});
