/** A held lease: its fence, the `lost` signal, renewing, checking and giving it back. */
import './dispose.js';
import type pg from 'pg';

import type { Connections } from './connections.js';
import { LeaseLostError } from './errors.js';
import { type Grant, serverElapsed } from './model.js';
import { Schedule } from './schedule.js';
import type { Statements } from './sql.js';
import { now } from './waiting.js';
import { startWatchdog } from './watchdog.js';

/** What the leases of a client share with it. */
export interface LeaseHome {
  readonly connections: Connections;
  /** Leases not yet released, released by `Client.close()`. */
  readonly held: Set<Lease>;
  /** Where a lease that is lost says so (a warning by default). */
  readonly onLost: (lease: Lease, reason: string) => void;
}

/**
 * A held lock: one hold of a lease (a reentrant acquire by the same owner gives another `Lease`
 * with the same fence and one more hold; the key is free once every one has let go).
 *
 * While it is held a watchdog renews it every third of its ttl; {@link lost} aborts if it is
 * lost anyway (a renewal answered that it is no longer ours, or none got through before its ttl
 * ran out). Pass {@link fence} with every write it protects. `await using` releases it.
 */
export class Lease {
  /** The fence token: larger than any earlier grant's of this key. */
  readonly fence: bigint;
  /** Aborts (with a `LeaseLostError` as its reason) when the lease is lost while still wanted; never on release. */
  readonly lost: AbortSignal;
  readonly schedule: Schedule;
  private readonly controller = new AbortController();
  private released = false;
  protected expiry: Date | null;
  private readonly stopWatchdog: () => void;
  private stopSession: () => void = () => undefined;

  /** @internal */
  constructor(
    protected readonly home: LeaseHome,
    protected readonly statements: Statements,
    /** The owner identity the lease is held as. */
    readonly owner: string,
    /** The locked key (for a multi-key lease, its keys joined with ", "). */
    readonly key: string,
    grant: Grant,
    protected readonly ttl: number | null,
    sent: number,
    renewEvery: number | null,
    private session: pg.PoolClient | null,
  ) {
    this.fence = grant.fence;
    this.lost = this.controller.signal;
    if (ttl === null) {
      this.expiry = null;
      this.schedule = new Schedule(Infinity, Infinity, null, sent);
      this.stopWatchdog = () => undefined;
      // The session is the lease: if it breaks, the lease ended with it (and pg would throw the
      // error at nobody otherwise).
      const ended = (): void => this.markLost('its session ended');
      session?.on('error', ended);
      this.stopSession = () => session?.off('error', ended);
    } else {
      // The server's expiry is its grant time plus the ttl; the local deadline is no later.
      this.expiry = new Date(grant.serverNow.getTime() + ttl);
      this.schedule = new Schedule(ttl, sent + serverElapsed(grant) + ttl, renewEvery, sent);
      this.stopWatchdog = startWatchdog(this);
    }
    home.held.add(this);
  }

  /** Whether the lease has no ttl and ends with its connection (which it keeps). */
  get sessionBound(): boolean {
    return this.ttl === null;
  }

  /** When the lease ends unless renewed, as last known (server clock); null if session-bound. */
  get expiresAt(): Date | null {
    return this.expiry;
  }

  /** @internal */
  get ended(): boolean {
    return this.released;
  }

  /** @internal */
  get isLost(): boolean {
    return this.lost.aborted;
  }

  /** Whether the lease is still ours as far as this process knows (no round trip). */
  get isHeld(): boolean {
    return !this.lost.aborted && !this.released && now() < this.schedule.deadline;
  }

  /** @internal */
  markLost(reason: string): void {
    if (this.released || this.lost.aborted) return;
    this.home.onLost(this, reason);
    this.controller.abort(new LeaseLostError(`the lease on ${JSON.stringify(this.key)} was lost: ${reason}`));
  }

  /**
   * Renews the lease now for another ttl: the new expiry (null for a session-bound lease, which
   * is only checked). Rejects with `LeaseLostError` if it is no longer ours, which also aborts {@link lost}.
   */
  async renew(): Promise<Date | null> {
    if (this.ttl === null) {
      if (this.lost.aborted || !(await this.holds())) {
        this.markLost('the session-bound lease is gone');
        throw new LeaseLostError(`the lease on ${JSON.stringify(this.key)} is gone`);
      }
      return null;
    }
    const sent = now();
    const expiry = await this.renewTtl();
    if (expiry === null) {
      this.markLost('renewal answered that the lease is no longer ours');
      throw new LeaseLostError(`the lease on ${JSON.stringify(this.key)} is no longer ours`);
    }
    this.schedule.extended(sent);
    return expiry;
  }

  /** @internal One renewal through the pool: the new expiry, or null if no longer ours. */
  async renewTtl(): Promise<Date | null> {
    const row = await this.home.connections.one(this.statements.renew, [this.key, this.owner, (this.ttl as number) / 1000]);
    const expiry = row[0] as Date | null;
    if (expiry !== null) this.expiry = expiry;
    return expiry;
  }

  /** Whether the live lease on the key still carries this fence (`dlock_holds`). Changes nothing. */
  async holds(): Promise<boolean> {
    const params = [this.key, this.fence];
    const rows = this.session === null
      ? await this.home.connections.rows(this.statements.holds, params)
      : await this.home.connections.run(this.session, this.statements.holds, params);
    return rows[0]?.[0] === true;
  }

  /** Gives this hold back now: true if the lease was still ours, false if it had already ended or was released before. */
  async release(): Promise<boolean> {
    if (this.released) return false;
    this.released = true;
    this.stopWatchdog();
    this.home.held.delete(this);
    const session = this.session;
    this.session = null;
    this.stopSession();
    try {
      const released = await this.releaseCall(session);
      if (session !== null) this.home.connections.giveBack(session);
      return released;
    } catch (e) {
      // Not sure the release happened: closing a session-bound lease's session ends it anyway.
      if (session !== null) this.home.connections.giveBack(session, e instanceof Error ? e : new Error(String(e)));
      throw e;
    }
  }

  protected async releaseCall(session: pg.PoolClient | null): Promise<boolean> {
    const params = [this.key, this.owner];
    const rows = session === null
      ? await this.home.connections.rows(this.statements.release, params)
      : await this.home.connections.run(session, this.statements.release, params);
    return rows[0]?.[0] === true;
  }

  /** `await using lease = await client.lock(...)`: released at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/**
 * Every key of a multi-key lock, held together: one watchdog renews them all, {@link lost}
 * aborts if any is lost, and releasing gives back all of them. Renewals and releases go key by
 * key, each in a transaction of its own, so that they never hold one key's lock while waiting
 * for another's (no cycle with a concurrent multi-key grant of the same keys).
 */
export class MultiLease extends Lease {
  /** @internal */
  constructor(
    home: LeaseHome,
    statements: Statements,
    owner: string,
    /** The keys, in the order they were asked for. */
    readonly keys: readonly string[],
    /** The fence of each key, in the order of {@link keys}. */
    readonly fences: readonly bigint[],
    grant: Grant,
    ttl: number,
    sent: number,
    renewEvery: number | null,
  ) {
    super(home, statements, owner, keys.join(', '), grant, ttl, sent, renewEvery, null);
  }

  override async renewTtl(): Promise<Date | null> {
    const connections = this.home.connections;
    const connection = await connections.take();
    const expiries: (Date | null)[] = [];
    try {
      for (const key of this.keys) {
        const rows = await connections.run(connection, this.statements.renew, [key, this.owner, (this.ttl as number) / 1000]);
        expiries.push(rows[0]?.[0] as Date | null);
      }
    } finally {
      connections.giveBack(connection);
    }
    if (expiries.some((e) => e === null)) return null;
    this.expiry = new Date(Math.min(...expiries.map((e) => (e as Date).getTime())));
    return this.expiry;
  }

  override async holds(): Promise<boolean> {
    const row = await this.home.connections.one(this.statements.holdsAll, [this.keys, this.fences]);
    return row[0] === true;
  }

  protected override async releaseCall(): Promise<boolean> {
    const connections = this.home.connections;
    const connection = await connections.take();
    let all = true;
    try {
      for (const key of this.keys) {
        const rows = await connections.run(connection, this.statements.release, [key, this.owner]);
        all = all && rows[0]?.[0] === true;
      }
    } finally {
      connections.giveBack(connection);
    }
    return all;
  }
}

