/** Elections: campaigning for the lead (`dlock_campaign`), the leadership that keeps it, who leads now (`dlock_leader`), and observing changes of leader. */
import './dispose.js';
import * as args from './args.js';
import { NotAcquiredError, UnsupportedError } from './errors.js';
import type { Lease } from './lease.js';
import { type LockHome, tryAcquire } from './lock.js';
import type { Leader } from './model.js';
import { RECHECK, Watched, now } from './waiting.js';

/** How an election is run (durations in ms). */
export interface ElectionOptions {
  /** How long a dead leader keeps the lead (default 30 s), renewed every third of it. */
  ttl?: number;
  /** How long `campaign` waits to lead (default null: without limit; 0: one try). */
  wait?: number | null;
  /** Should the leader's lease expire rather than be resigned, nobody leads for this long after. */
  lockDelay?: number;
}

/**
 * An election, by name: `await client.election('scheduler').campaign('node-a:8080')`. Its leader
 * holds a lease on the election's name (which shares the key space of locks); its term is the
 * lease's fence, so terms only grow and work done as leader can be fenced with it.
 */
export class Election {
  private readonly ttl: number;
  private readonly wait: number | null;
  private readonly lockDelay: number;

  /** @internal */
  constructor(private readonly home: LockHome, private readonly owner: string, readonly name: string, options: ElectionOptions) {
    this.ttl = args.positive('ttl', options.ttl ?? 30_000);
    this.wait = options.wait === undefined ? null : args.wait(options.wait);
    this.lockDelay = args.millis('lockDelay', options.lockDelay ?? 0);
  }

  /**
   * Waits (the election's `wait`) to lead, publishing `info` (at most 1 kB) to {@link leader}.
   * The wait holds no pooled connection. Rejects with `NotAcquiredError` if the wait runs out.
   */
  async campaign(info?: string | null): Promise<Leadership> {
    const request = { key: this.name, owner: this.owner, kind: 'leader' as const, ttl: this.ttl, permits: null, info: args.info(info), lockDelay: this.lockDelay };
    const lease = await tryAcquire(this.home, { request, wait: this.wait, watchdog: true, renewEvery: null });
    if (lease === null) throw new NotAcquiredError(this.name, this.wait !== 0);
    return new Leadership(lease);
  }

  /** The current leader, or null when nobody leads. */
  async leader(): Promise<Leader | null> {
    const statements = await this.home.statements();
    const rows = await this.home.connections.rows(statements.leader, [this.name]);
    const row = rows[0];
    if (row === undefined) return null;
    return { info: row[0] as string | null, term: row[1] as bigint, since: row[2] as Date, expiresAt: row[3] as Date | null };
  }

  /**
   * The leaders as they change, as an async iterator: first the leader now (null: nobody), then
   * every change the server notifies (a new term, or nobody). It watches the election on the
   * client's listener connection. Throws `UnsupportedError` behind a transaction pooler (no
   * notification passes it): poll {@link leader} there.
   */
  observe(): LeaderChanges {
    if (!this.home.waits.listens) {
      throw new UnsupportedError(
        "observing an election needs the client's listener connection, which a client behind a transaction pooler has not: poll leader() instead",
      );
    }
    return new LeaderChanges(this, this.home);
  }
}

/** The lead of an election, kept by the watchdog until resigned (`await using` resigns). */
export class Leadership {
  /** @internal */
  constructor(private readonly lease: Lease) {}

  get election(): string {
    return this.lease.key;
  }

  /** The term: greater than every earlier leader's. Pass it with every write made as leader. */
  get term(): bigint {
    return this.lease.fence;
  }

  /** Aborts when the lead is lost while still wanted: stop acting as leader. */
  get lost(): AbortSignal {
    return this.lease.lost;
  }

  get isLeading(): boolean {
    return this.lease.isHeld;
  }

  get expiresAt(): Date | null {
    return this.lease.expiresAt;
  }

  renew(): Promise<Date | null> {
    return this.lease.renew();
  }

  holds(): Promise<boolean> {
    return this.lease.holds();
  }

  /** Gives up the lead now, so that the next candidate takes over at once: true if it was still ours. */
  resign(): Promise<boolean> {
    return this.lease.release();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
  }
}

/**
 * The leaders of an election as they change: `for await`, or {@link get} with a timeout.
 * Changes that come faster than they are read are merged: each item is the leader when it was
 * read, and differs from the one before. `close()` (or leaving a `for await`) stops watching.
 */
export class LeaderChanges implements AsyncIterableIterator<Leader | null> {
  private watched: Promise<Watched> | null = null;
  private last: bigint | null | undefined = undefined;
  private closed = false;

  /** @internal */
  constructor(private readonly election: Election, private readonly home: LockHome) {}

  private start(): Promise<Watched> {
    if (this.watched === null) {
      this.watched = this.home.statements().then((statements) => new Watched(this.home.waits, this.election.name, statements).start());
    }
    return this.watched;
  }

  /** The next leader (null: nobody leads), waiting up to `timeout` ms for a change (default: without limit); rejects with a `TimeoutError` DOMException if none came. */
  async get(timeout: number | null = null): Promise<Leader | null> {
    const watched = await this.start();
    const deadline = timeout === null ? null : now() + timeout;
    for (;;) {
      const leader = await this.election.leader();
      const term = leader === null ? null : leader.term;
      if (term !== this.last) {
        this.last = term;
        return leader;
      }
      const at = now();
      if (deadline !== null && at >= deadline) {
        throw new DOMException(`no change of leader of ${JSON.stringify(this.election.name)} within ${timeout} ms`, 'TimeoutError');
      }
      // A safety net re-reads the leader now and then, should a notification go missing.
      await watched.changed(deadline === null ? RECHECK : Math.min(RECHECK, deadline - at));
    }
  }

  async next(): Promise<IteratorResult<Leader | null>> {
    if (this.closed) return { done: true, value: undefined };
    return { done: false, value: await this.get() };
  }

  async return(): Promise<IteratorResult<Leader | null>> {
    await this.close();
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Stops watching the election. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.watched !== null) (await this.watched.catch(() => null))?.close();
  }
}
