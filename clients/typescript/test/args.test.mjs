// Bad input is refused with TypeError or RangeError (code ERR_DLOCK_INVALID_ARGUMENT, the
// server's SQLSTATE) before any round trip: the client here has no server to ask.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Client, ConnectionFailedError, INVALID_ARGUMENT } from '../dist/index.js';

const offline = new Client('postgresql://nobody@127.0.0.1:1/none');

async function refused(call, Kind, sqlstate = '22023') {
  await assert.rejects(call, (e) => e instanceof Kind && e.code === INVALID_ARGUMENT && e.sqlstate === sqlstate);
}

test('values outside the contract are RangeErrors with limits in bytes', async () => {
  await refused(() => offline.lock(''), RangeError);
  await refused(() => offline.lock('k'.repeat(1025)), RangeError);
  await refused(() => offline.lock('é'.repeat(513)), RangeError);
  await refused(() => offline.lock('k', { ttl: 0 }), RangeError);
  await refused(() => offline.lock('k', { ttl: -1 }), RangeError);
  await refused(() => offline.lock('k', { wait: -1 }), RangeError);
  await refused(() => offline.lock('k', { ttl: Number.NaN }), RangeError);
  await refused(() => offline.semaphore('k', 0), RangeError);
  await refused(() => offline.lockAll([]), RangeError);
  await refused(() => offline.lockAll(['a', 'a']), RangeError);
  await refused(() => offline.lockAll(Array.from({ length: 65 }, (_, i) => `k${i}`)), RangeError);
  await refused(() => offline.election('e').campaign('i'.repeat(1025)), RangeError);
  await refused(() => offline.waitFree('k', -5), RangeError);
  await refused(() => offline.lock('a\0b'), RangeError, '22021');
  assert.throws(() => new Client('postgresql://nobody@127.0.0.1:1/none', { owner: 'o'.repeat(257) }), RangeError);
});

test('arguments of the wrong type are TypeErrors', async () => {
  await refused(() => offline.lock(null), TypeError, '22004');
  await refused(() => offline.lock(42), TypeError, '22004');
  await refused(() => offline.lock('k', { ttl: '30s' }), TypeError);
  await refused(() => offline.semaphore('k', 1.5), TypeError);
  await refused(() => offline.lockAll('ab'), TypeError);
  await refused(() => offline.lock('k', { watchdog: 'yes' }), TypeError);
});

test('the limits themselves pass the checks, and only then is the server asked', async () => {
  await assert.rejects(() => offline.lock('k'.repeat(1024)), ConnectionFailedError);
  await assert.rejects(() => offline.lock('é'.repeat(512), { ttl: null, wait: null }), ConnectionFailedError);
  await offline.close();
});
