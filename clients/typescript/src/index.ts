/**
 * Node.js client of **dlock**, distributed locks inside PostgreSQL.
 *
 * ```js
 * import { Client } from 'dlock-client';
 * const client = new Client('postgresql://app@db/app');
 * await client.withLock('report:nightly', { ttl: 30_000, wait: 10_000 }, async (lease) => {
 *   await writeReport({ fence: lease.fence, signal: lease.lost }); // stop when lease.lost aborts
 * });
 * await client.close();
 * ```
 */
export { Client, DEFAULT_POOL_SIZE, DEFAULT_TTL, type ClientOptions, type LockOptions } from './client.js';
export { Election, LeaderChanges, Leadership, type ElectionOptions } from './election.js';
export {
  ConnectionFailedError,
  DeadlockError,
  DlockError,
  HeldHereError,
  INVALID_ARGUMENT,
  InvalidArgumentError,
  LeaseLostError,
  ModeConflictError,
  NotAcquiredError,
  NotInstalledError,
  PermissionDeniedError,
  QueryCanceledError,
  ServerError,
  UnsupportedError,
} from './errors.js';
export { Lease, MultiLease } from './lease.js';
export type { Leader, LiveLease } from './model.js';
export type { PoolerMode } from './conninfo.js';
