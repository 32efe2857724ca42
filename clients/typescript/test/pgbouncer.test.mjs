// Behind pgbouncer in transaction mode (4 server connections): nothing prepared, waits that
// retry holding no server connection, and what cannot work there refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { UnsupportedError } from '../dist/index.js';
import { client, keys, pgbouncerDsn } from './helpers.mjs';

test('locks, renewals and twenty waiters through the pooler', async () => {
  const key = keys('pgbouncer');
  const a = client({ pooler: 'transaction' }, pgbouncerDsn());
  const b = client({}, `${pgbouncerDsn()}?dlock_pooler=transaction`);
  assert.equal(b.pooler, 'transaction');
  for (let i = 0; i < 30; i++) await a.withLock(key('many'), async (lease) => assert.equal(await lease.holds(), true));
  const held = await a.lock(key(), { ttl: 10_000 });
  assert.ok((await held.renew()) instanceof Date);
  const fences = [];
  const waiters = Array.from({ length: 20 }, (_, i) => b.withOwner(`w${i}-${Math.random()}`).withLock(key(), { wait: 30_000 }, async (lease) => fences.push(lease.fence)));
  await held.release();
  await Promise.all(waiters);
  assert.equal(new Set(fences).size, 20);
});

test('what needs a session is refused behind the pooler', async () => {
  const key = keys('refused');
  const a = client({ pooler: 'transaction' }, pgbouncerDsn());
  await assert.rejects(() => a.lock(key(), { ttl: null }), UnsupportedError);
  assert.throws(() => a.election(key('e')).observe(), UnsupportedError);
  assert.equal(await a.waitFree(key(), 100), true);
});
