/** The client: a connection pool, one owner identity, and what its locks share (the listener their waits use). */
import './dispose.js';
import { debuglog } from 'node:util';

import pg from 'pg';

import * as args from './args.js';
import { DEFAULT_MAX_POLL_INTERVAL } from './backoff.js';
import { Connections } from './connections.js';
import { type PoolerMode, poolerMode, splitPooler } from './conninfo.js';
import { Election, type ElectionOptions } from './election.js';
import { HeldHereError, LeaseLostError, NotAcquiredError, NotInstalledError } from './errors.js';
import type { Lease, MultiLease } from './lease.js';
import { Listener } from './listener.js';
import { type LockHome, tryAcquire, tryAcquireAll } from './lock.js';
import type { Busy, LiveLease } from './model.js';
import { generateOwner } from './owner.js';
import type { Request } from './request.js';
import { FIND, Statements } from './sql.js';
import { RECHECK, Waits, Watched, now, retry } from './waiting.js';

const log = debuglog('dlock');

/** The ttl of a lease unless said otherwise (ms). */
export const DEFAULT_TTL = 30_000;
/** Pooled connections a client opens at most unless said otherwise (its waits share one more). */
export const DEFAULT_POOL_SIZE = 15;

/** How a client connects. */
export interface ClientOptions {
  /** The owner identity of its leases (default `host:pid:random`); must be unguessable to others. */
  owner?: string;
  /** Pooled connections at most (default 15), for a client made from a connection string. */
  poolSize?: number;
  /** `transaction` behind pgbouncer in transaction mode (or `dlock_pooler=transaction` in the string). */
  pooler?: PoolerMode;
  /** Behind a transaction pooler, the longest pause between two tries of a wait (default 250 ms). */
  maxPollInterval?: number;
}

/** How a lock is taken and kept (durations in milliseconds). */
export interface LockOptions {
  /** How long the lease outlives its holder (default 30 s); null binds it to its connection instead. */
  ttl?: number | null;
  /** How long to wait for the key: 0 (the default) tries once, null waits without limit. */
  wait?: number | null;
  /** Renew every `renewEvery` (a third of the ttl) while held (default true). */
  watchdog?: boolean;
  renewEvery?: number | null;
  /** Should the lease expire rather than be released, keep the key from new grants this long after. */
  lockDelay?: number;
  /** A shared lease (a read lock): beside other shared holders, never beside an exclusive one. */
  shared?: boolean;
  /** A semaphore's permit: shared, granted only while fewer than `permits` owners hold the key. */
  permits?: number;
}

/** What a client and its `withOwner` copies share. */
class Home implements LockHome {
  readonly held = new Set<Lease>();
  readonly waits: Waits;
  private found: Promise<Statements> | null = null;

  constructor(readonly connections: Connections, listener: (() => pg.ClientConfig) | null, maxPollInterval: number) {
    const make = listener === null ? null : (waits: Waits) => new Listener(listener, (c) => waits.notified(c), () => waits.lost(), (k) => waits.hasLine(k));
    // Notifications cannot pass a transaction pooler: there waits retry.
    this.waits = new Waits(make, maxPollInterval);
  }

  onLost(lease: Lease, reason: string): void {
    log('lease lost: key=%s fence=%s: %s', lease.key, lease.fence, reason);
  }

  /** The statements of this database, its extension's schema found on first use (looked for again after a failure). */
  statements(): Promise<Statements> {
    if (this.found === null) {
      this.found = this.connections.one(FIND, []).then(([database, schema]) => {
        if (schema === null) {
          throw new NotInstalledError(
            `the dlock extension is not installed in database ${JSON.stringify(database)} (CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock;)`,
          );
        }
        return new Statements(schema as string);
      });
      this.found.catch(() => {
        this.found = null;
      });
    }
    return this.found;
  }

  async close(): Promise<void> {
    for (const lease of [...this.held]) await lease.release().catch(() => undefined);
    await this.waits.listener?.close();
    await this.connections.close();
  }
}

/**
 * A dlock client: a pool of connections to one database and one owner identity.
 *
 * `new Client(connectionString)` (a `postgresql://` URL; none takes everything from the `PG*`
 * environment) opens no connection before the first call; `new Client(pool)` uses a `pg.Pool` of
 * yours, its waits still sharing one listener connection opened with the pool's options.
 * Behind pgbouncer in transaction mode say so (`pooler: 'transaction'`, or
 * `dlock_pooler=transaction` in the string): nothing is prepared, waits retry instead of
 * listening, and session-bound leases are refused.
 */
export class Client {
  readonly owner: string;
  private readonly home: Home;
  private readonly ownsHome: boolean;

  constructor(connection?: string | pg.Pool, options: ClientOptions = {}, shared?: Home) {
    this.owner = options.owner === undefined ? generateOwner() : args.owner(options.owner);
    this.ownsHome = shared === undefined;
    if (shared !== undefined) {
      this.home = shared;
      return;
    }
    const maxPoll = args.positive('maxPollInterval', options.maxPollInterval ?? DEFAULT_MAX_POLL_INTERVAL);
    let pool: pg.Pool;
    let mode: PoolerMode;
    let listenWith: () => pg.ClientConfig;
    if (connection instanceof pg.Pool) {
      pool = connection;
      mode = poolerMode(options.pooler);
      listenWith = () => ({ ...pool.options });
    } else {
      if (connection !== undefined && typeof connection !== 'string') {
        throw new TypeError('dlock: connect with a connection string or a pg.Pool');
      }
      const poolSize = options.poolSize ?? DEFAULT_POOL_SIZE;
      if (!Number.isInteger(poolSize) || poolSize < 1) throw new RangeError('dlock: poolSize must be an integer of at least 1');
      const [rest, inString] = splitPooler(connection ?? '');
      mode = poolerMode(options.pooler ?? inString);
      // The string's own application_name, if it has one, wins over this default.
      const config: pg.ClientConfig = { application_name: 'dlock', ...(rest === '' ? {} : { connectionString: rest }) };
      pool = new pg.Pool({ ...config, max: poolSize, allowExitOnIdle: true });
      // A pooled connection that breaks while idle must not crash the process: the pool drops it.
      pool.on('error', (e) => log('idle pooled connection failed: %s', e.message));
      listenWith = () => ({ ...config });
    }
    const transaction = mode === 'transaction';
    this.home = new Home(new Connections(pool, transaction, !(connection instanceof pg.Pool)), transaction ? null : listenWith, maxPoll);
  }

  /** The same pool and listener under another owner identity (e.g. tasks of one process that count separately on a semaphore). */
  withOwner(owner: string): Client {
    return new Client(undefined, { owner }, this.home);
  }

  /** `session` (direct, or a session pooler) or `transaction`. */
  get pooler(): PoolerMode {
    return this.home.connections.transactionPooler ? 'transaction' : 'session';
  }

  /** The connection pool. */
  get pool(): pg.Pool {
    return this.home.connections.pool;
  }

  /** The schema the extension lives in (looked up on first use, like every call). */
  async extensionSchema(): Promise<string> {
    return (await this.home.statements()).schema;
  }

  private request(key: unknown, options: LockOptions, kind: 'exclusive' | 'shared'): [Request, number | null, boolean, number | null] {
    const permits = options.permits === undefined ? null : args.permits(options.permits);
    const shared = kind === 'shared' || permits !== null || (options.shared !== undefined && args.flag('shared', options.shared));
    const request: Request = {
      key: args.key(key),
      owner: this.owner,
      kind: shared ? 'shared' : 'exclusive',
      ttl: options.ttl === undefined ? DEFAULT_TTL : args.ttl(options.ttl),
      permits,
      info: null,
      lockDelay: args.millis('lockDelay', options.lockDelay ?? 0),
    };
    const wait = options.wait === undefined ? 0 : args.wait(options.wait);
    const watchdog = options.watchdog === undefined ? true : args.flag('watchdog', options.watchdog);
    const renewEvery = options.renewEvery === undefined || options.renewEvery === null ? null : args.positive('renewEvery', options.renewEvery);
    return [request, wait, watchdog, renewEvery];
  }

  /** Takes the lock if it can (within `options.wait`): null when another owner keeps the key. */
  async tryLock(key: string, options: LockOptions = {}): Promise<Lease | null> {
    const [request, wait, watchdog, renewEvery] = this.request(key, options, 'exclusive');
    return tryAcquire(this.home, { request, wait, watchdog, renewEvery });
  }

  /**
   * Takes an exclusive lock on `key` (or a shared one, with `shared` or `permits`): a {@link Lease},
   * or a `NotAcquiredError` when another owner keeps the key (at once, or when the wait ran out).
   * A wait holds no pooled connection.
   */
  async lock(key: string, options: LockOptions = {}): Promise<Lease> {
    const lease = await this.tryLock(key, options);
    if (lease === null) throw new NotAcquiredError(key, (options.wait ?? 0) !== 0);
    return lease;
  }

  /** Takes `key` shared (a read lock): beside other shared holders, never beside an exclusive one. */
  shared(key: string, options: LockOptions = {}): Promise<Lease> {
    return this.lock(key, { ...options, shared: true });
  }

  /** Takes one permit of a counting semaphore of `permits` on `key`; everyone using the key must pass the same number. */
  semaphore(key: string, permits: number, options: LockOptions = {}): Promise<Lease> {
    return this.lock(key, { ...options, permits });
  }

  /** Takes every key of `keys` at once, all or none (at most 64); the fences come in the order of `keys`. */
  async lockAll(keys: Iterable<string>, options: Omit<LockOptions, 'shared' | 'permits'> = {}): Promise<MultiLease> {
    const checked = args.keys(keys);
    const lease = await tryAcquireAll(this.home, {
      keys: checked,
      owner: this.owner,
      ttl: args.positive('ttl', options.ttl ?? DEFAULT_TTL),
      wait: options.wait === undefined ? 0 : args.wait(options.wait),
      watchdog: options.watchdog === undefined ? true : args.flag('watchdog', options.watchdog),
      renewEvery: options.renewEvery === undefined || options.renewEvery === null ? null : args.positive('renewEvery', options.renewEvery),
      lockDelay: args.millis('lockDelay', options.lockDelay ?? 0),
    });
    if (lease === null) throw new NotAcquiredError(checked.join(', '), (options.wait ?? 0) !== 0);
    return lease;
  }

  /**
   * Runs `work` while holding the lock, and releases it after: `work`'s result, or a
   * `LeaseLostError` if the lease was lost before `work` ended (whatever it returned: its effects
   * may have overlapped another holder's). `work` gets the lease: stop when `lease.lost` aborts.
   */
  withLock<T>(key: string, work: (lease: Lease) => Promise<T>): Promise<T>;
  withLock<T>(key: string, options: LockOptions, work: (lease: Lease) => Promise<T>): Promise<T>;
  async withLock<T>(key: string, second: LockOptions | ((lease: Lease) => Promise<T>), third?: (lease: Lease) => Promise<T>): Promise<T> {
    const [options, work] = typeof second === 'function' ? [{}, second] : [second, third];
    if (typeof work !== 'function') throw new TypeError('dlock: withLock needs the work to run, a function');
    const lease = await this.lock(key, options);
    let output: T;
    try {
      output = await work(lease);
    } catch (e) {
      await lease.release().catch(() => undefined);
      throw e;
    }
    const lostDuringWork = !lease.isHeld;
    let stillOurs = true;
    try {
      stillOurs = await lease.release();
    } catch (e) {
      // The work finished while the lease was live as far as we know; it ends by its ttl.
      log('release after withLock failed: %s', e instanceof Error ? e.message : String(e));
    }
    if (lostDuringWork || !stillOurs) throw new LeaseLostError(`the lease on ${JSON.stringify(key)} was lost before the work ended`);
    return output;
  }

  /** The election `name`: campaign for its lead, see who leads, observe changes. */
  election(name: string, options: ElectionOptions = {}): Election {
    return new Election(this.home, this.owner, args.key(name), options);
  }

  /**
   * Waits up to `timeout` ms (null: without limit) until no lease holds `key`, without taking it:
   * true once it is free, false if the timeout elapsed first (0: look once). Holds no pooled
   * connection while it waits. Rejects with `HeldHereError` if the server session that looks holds
   * the key itself (behind a transaction pooler, where that session is whichever the pooler lent,
   * it only means the key is held).
   */
  async waitFree(key: string, timeout: number | null): Promise<boolean> {
    const checkedKey = args.key(key);
    const wait = args.wait(timeout);
    const home = this.home;
    const statements = await home.statements();
    const look = async (): Promise<[boolean, number | null]> => {
      let row: unknown[];
      try {
        row = await home.connections.one(statements.isFree, [checkedKey]);
      } catch (e) {
        // Behind a transaction pooler the session that looked is whichever the pooler lent,
        // maybe one that took a lease of the key for another client: held, no more.
        if (e instanceof HeldHereError && home.connections.transactionPooler) return [false, null];
        throw e;
      }
      const [free, retryAfter] = row;
      return [free === true, retryAfter === null ? null : Math.max((retryAfter as number) * 1000, 0)];
    };
    if (wait === 0) return (await look())[0];
    const deadline = wait === null ? null : now() + wait;
    if (!home.waits.listens) {
      const attempt = async (): Promise<true | Busy> => {
        const [free, retryAfter] = await look();
        return free ? true : { busy: true, retryAfter };
      };
      return (await retry(deadline, home.waits.maxPollInterval, attempt)) !== null;
    }
    const watched = await new Watched(home.waits, checkedKey, statements).start();
    try {
      for (;;) {
        const [free, retryAfter] = await look();
        const at = now();
        if (free) return true;
        if (deadline !== null && at >= deadline) return false;
        const pause = retryAfter ?? RECHECK;
        await watched.changed(deadline === null ? pause : Math.min(pause, deadline - at));
      }
    } finally {
      watched.close();
    }
  }

  /** The live leases (`dlock_locks`), ordered by key; owners of other roles' leases are null unless the role is an admin. */
  async locks(): Promise<LiveLease[]> {
    const statements = await this.home.statements();
    const rows = await this.home.connections.rows(statements.locks, []);
    return rows.map((r) => ({
      key: r[0] as string,
      owner: r[1] as string | null,
      fence: r[2] as bigint,
      holdCount: Number(r[3]),
      expiresAt: r[4] as Date | null,
      holderRole: r[5] as string | null,
      waiters: Number(r[6]),
      mode: r[7] as 'exclusive' | 'shared',
    }));
  }

  /** Frees `key` whoever holds it: true if it was held. For administrators (`dlock_admin` members, superusers); `PermissionDeniedError` otherwise. */
  async forceRelease(key: string): Promise<boolean> {
    const checkedKey = args.key(key);
    const statements = await this.home.statements();
    return (await this.home.connections.one(statements.forceRelease, [checkedKey]))[0] === true;
  }

  /** Releases the leases still held (best effort), and closes the listener and the pool (if it is the client's own). A `withOwner` copy closes nothing. */
  async close(): Promise<void> {
    if (this.ownsHome) await this.home.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}


