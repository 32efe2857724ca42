// Locks against a real server: grants, reentrancy, fences, modes, multi-key locks, withLock,
// session-bound leases, the lost signal.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import pg from 'pg';

import { Client, LeaseLostError, ModeConflictError, MultiLease, NotAcquiredError, InvalidArgumentError } from '../dist/index.js';
import { aborts, admin, client, dsn, eventually, keys } from './helpers.mjs';

test('a lock excludes others until released, and fences grow', async () => {
  const key = keys('exclusive');
  const [a, b] = [client(), client()];
  const first = await a.lock(key(), { ttl: 30_000 });
  assert.equal(typeof first.fence, 'bigint');
  assert.equal(await b.tryLock(key()), null);
  await assert.rejects(() => b.lock(key()), (e) => e instanceof NotAcquiredError && e.waited === false);
  assert.equal(await first.release(), true);
  assert.equal(await first.release(), false);
  const second = await b.lock(key());
  assert.ok(second.fence > first.fence);
  await second[Symbol.asyncDispose]();
  assert.equal(second.isHeld, false);
});

test('the same owner re-enters with the same fence and one more hold', async () => {
  const key = keys('reentrant');
  const session = await admin();
  const a = client();
  const [one, two] = [await a.lock(key()), await a.lock(key())];
  assert.equal(one.fence, two.fence);
  const holds = async () => (await session.query('SELECT hold_count FROM dlock.dlock_locks WHERE key = $1', [key()])).rows[0]?.hold_count;
  assert.equal(await holds(), 2);
  await one.release();
  assert.equal(await two.holds(), true);
  await two.release();
  assert.equal(await holds(), undefined);
});

test('withLock returns the work, and rejects with LeaseLostError when the lease was lost during it', async () => {
  const key = keys('withlock');
  const [a, adminClient] = [client(), client()];
  assert.equal(await a.withLock(key('ok'), async (lease) => lease.fence > 0n), true);
  await assert.rejects(
    () => a.withLock(key('lost'), { ttl: 1500 }, async (lease) => {
      assert.equal(await adminClient.forceRelease(key('lost')), true);
      assert.equal(await aborts(lease.lost, 5000), true);
      assert.ok(lease.lost.reason instanceof LeaseLostError);
    }),
    LeaseLostError,
  );
  await assert.rejects(() => a.withLock(key('throws'), async () => { throw new Error('boom'); }), /boom/);
  assert.notEqual(await client().tryLock(key('throws')), null, 'released although the work threw');
});

test('the watchdog keeps a lease for many ttls; without it the lease runs out and says so', async () => {
  const key = keys('watchdog');
  const [a, b] = [client(), client()];
  const kept = await a.lock(key('kept'), { ttl: 1200 });
  assert.equal(await aborts(kept.lost, 3500), false);
  assert.equal(await kept.holds(), true);
  assert.ok((await kept.renew()) instanceof Date);
  const fixed = await a.lock(key('fixed'), { ttl: 1000, watchdog: false });
  assert.equal(await aborts(fixed.lost, 4000), true);
  const next = await b.lock(key('fixed'), { wait: 5000 });
  assert.ok(next.fence > fixed.fence);
  await assert.rejects(() => fixed.renew(), LeaseLostError);
  assert.equal(await fixed.release(), false);
});

test('shared leases, semaphores and multi-key locks', async () => {
  const key = keys('primitives');
  const [a, b, c] = [client(), client(), client()];
  const [r1, r2] = [await a.shared(key('rw')), await b.shared(key('rw'))];
  assert.notEqual(r1.fence, r2.fence);
  assert.equal(await c.tryLock(key('rw')), null);
  await assert.rejects(() => a.lock(key('rw')), (e) => e instanceof ModeConflictError && e.sqlstate === '0A000');
  const writer = c.lock(key('rw'), { wait: 10_000 });
  await r1.release();
  await r2.release();
  assert.ok((await writer).fence > r2.fence);
  const p1 = await a.semaphore(key('sem'), 2);
  await b.semaphore(key('sem'), 2);
  assert.equal(await c.tryLock(key('sem'), { permits: 2 }), null);
  await assert.rejects(() => c.semaphore(key('sem'), 3), (e) => e instanceof InvalidArgumentError && e.sqlstate === '22023');
  await p1.release();
  assert.notEqual(await c.tryLock(key('sem'), { permits: 2 }), null);
  const both = await a.lockAll([key('x'), key('y')]);
  assert.ok(both instanceof MultiLease);
  assert.deepEqual(both.keys, [key('x'), key('y')]);
  assert.equal(both.fences.length, 2);
  await assert.rejects(() => b.lockAll([key('y'), key('z')]), NotAcquiredError);
  assert.equal(await (await b.lock(key('z'))).release(), true, 'nothing of the refused request was held');
  assert.ok((await both.renew()) instanceof Date);
  assert.equal(await both.release(), true);
});

test('a session-bound lease keeps its connection and ends with it', async () => {
  const key = keys('bound');
  const session = await admin();
  const a = client({ poolSize: 2 });
  const bound = await a.lock(key(), { ttl: null });
  assert.equal(bound.sessionBound, true);
  assert.equal(bound.expiresAt, null);
  assert.equal(await bound.renew(), null);
  const pid = (await session.query('SELECT holder_pid FROM dlock.dlock_locks WHERE key = $1', [key()])).rows[0].holder_pid;
  await session.query('SELECT pg_terminate_backend($1)', [pid]);
  await eventually(async () => (await session.query('SELECT count(*)::int AS n FROM dlock.dlock_locks WHERE key = $1', [key()])).rows[0].n === 0);
  await assert.rejects(() => bound.release());
  assert.ok(await (await a.lock(key('after'))).release(), 'the pool replaced the broken connection');
});

test('a pool of the application, and a closed client releases what it held', async () => {
  const key = keys('pool');
  const pool = new pg.Pool({ connectionString: dsn, max: 3 });
  const a = new Client(pool);
  const b = client();
  await a.lock(key('one'));
  await a.lockAll([key('two'), key('three')]);
  const waiter = b.lock(key('one'), { wait: 10_000 });
  await a.close();
  assert.ok(await waiter);
  for (const name of ['two', 'three']) assert.notEqual(await b.tryLock(key(name)), null);
  await pool.query('SELECT 1'); // the application's pool is still its own, open
  await pool.end();
});

test('the extension is found in whatever schema it lives in', async () => {
  const session = await admin();
  const database = `dlock_schema_ts_${Math.random().toString(16).slice(2, 10)}`;
  await session.query(`CREATE DATABASE "${database}"`);
  try {
    const url = new URL(dsn);
    url.pathname = `/${database}`;
    const setup = new pg.Client({ connectionString: url.toString() });
    await setup.connect();
    await setup.query('CREATE SCHEMA "Odd ""Locks"""');
    await setup.query('CREATE EXTENSION dlock SCHEMA "Odd ""Locks"""');
    await setup.end();
    const c = new Client(url.toString());
    assert.equal(await c.extensionSchema(), 'Odd "Locks"');
    await c.withLock('k', async (lease) => assert.equal(await lease.holds(), true));
    await c.close();
  } finally {
    await session.query(`DROP DATABASE "${database}" WITH (FORCE)`);
  }
});
