// The conformance actions over dlock-client: how its API and errors map onto the scenarios'.
import pg from 'pg';
import {
  Client,
  HeldHereError,
  InvalidArgumentError,
  LeaseLostError,
  ModeConflictError,
  MultiLease,
  NotAcquiredError,
  PermissionDeniedError,
  ServerError,
  UnsupportedError,
  INVALID_ARGUMENT,
} from 'dlock-client';

/** The scenario's error kinds of the client's errors (the most specific first). */
const KINDS = [
  [NotAcquiredError, 'NotAcquired'],
  [LeaseLostError, 'LeaseLost'],
  [InvalidArgumentError, 'InvalidArgument'],
  [ModeConflictError, 'ModeConflict'],
  [PermissionDeniedError, 'PermissionDenied'],
  [HeldHereError, 'HeldHere'],
  [UnsupportedError, 'Unsupported'],
  [ServerError, 'Server'],
];

/** `[kind, sqlstate]` of an error the client threw, or null if it is none of the scenarios'. */
export function classify(error) {
  for (const [Kind, name] of KINDS) if (error instanceof Kind) return [name, error.sqlstate ?? null];
  // Bad arguments are the language's own errors, refused before any round trip.
  if (error?.code === INVALID_ARGUMENT) return [error instanceof TypeError ? 'WrongType' : 'InvalidArgument', error.sqlstate];
  if (error instanceof TypeError) return ['WrongType', null];
  if (error?.name === 'TimeoutError') return ['Timeout', null];
  return null;
}

export function client(url, { pooler, driverPool, poolSize, owner, pools }) {
  const options = { pooler, ...(owner === undefined ? {} : { owner }) };
  if (driverPool) {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    pool.on('error', () => undefined);
    pools.push(pool);
    return new Client(pool, options);
  }
  return new Client(url, { ...options, poolSize });
}

export function lock(client, { key, ttl, wait, mode, permits, watchdog, lockDelay }) {
  return client.lock(key, { ttl, wait, watchdog, lockDelay, ...(mode === 'shared' ? { shared: true } : {}), ...(permits === undefined ? {} : { permits }) });
}

export function withLock(client, { key, ttl, wait, mode, permits, watchdog, lockDelay }, work) {
  return client.withLock(key, { ttl, wait, watchdog, lockDelay, shared: mode === 'shared', ...(permits === undefined ? {} : { permits }) }, work);
}

export function fences(lease) {
  if (lease instanceof MultiLease) return [...lease.fences];
  if ('term' in lease) return [lease.term];
  return [lease.fence];
}

/** Whether `signal` aborts within `timeout` ms. */
export function waitLost(signal, timeout) {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(false);
    }, timeout);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(true);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

export const leader = (l) => (l === null ? null : { info: l.info, term: l.term });
