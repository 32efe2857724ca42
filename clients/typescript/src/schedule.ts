/**
 * When a TTL lease's watchdog acts, as the Rust client's `lock/watchdog.rs`: it renews every
 * `renewEvery` (a third of the ttl unless chosen, so that two renewals can fail before the lease
 * runs out), and declares the lease lost when its local deadline passes first.
 *
 * The local deadline (`performance.now()`, monotonic) is never later than the server's expiry:
 * a grant or renewal answered to a statement sent at `sent` happened after `sent`. Clocks of
 * client and server are never compared. Milliseconds.
 */

/** Shortest pause before retrying a renewal that failed on a connection error. */
export const MIN_RETRY = 10;

export type Due = 'sleep' | 'renew' | 'lost';

/** How often a watchdog renews a lease of `ttl`: as chosen, else a third of the ttl. */
export const renewalInterval = (ttl: number, chosen: number | null): number => chosen ?? ttl / 3;

/** The deadline and the renewals of one TTL lease. */
export class Schedule {
  nextRenewal: number | null;
  renewing = false;

  constructor(readonly ttl: number, public deadline: number, readonly renewEvery: number | null, now: number) {
    this.nextRenewal = renewEvery === null ? null : now + renewEvery;
  }

  /** When to look again: the next renewal, or the deadline if sooner or if a renewal is on its way. */
  nextWake(): number {
    if (this.nextRenewal === null || this.renewing) return this.deadline;
    return Math.min(this.nextRenewal, this.deadline);
  }

  /** What to do at `now`; a renewal it asks for counts as started. */
  due(now: number): Due {
    if (now >= this.deadline) return 'lost';
    if (this.nextRenewal !== null && !this.renewing && now >= this.nextRenewal) {
      this.renewing = true;
      return 'renew';
    }
    return 'sleep';
  }

  /** A renewal sent at `sent` was answered with a new expiry (the watchdog's or one by hand). */
  extended(sent: number): void {
    this.deadline = Math.max(this.deadline, sent + this.ttl);
  }

  /** The watchdog's renewal, sent at `sent`, succeeded at `now`. */
  renewed(sent: number, now: number): void {
    this.extended(sent);
    this.renewing = false;
    if (this.renewEvery !== null) this.nextRenewal = now + this.renewEvery;
  }

  /** The watchdog's renewal failed on a connection error: retry sooner than usual. */
  retrySoon(now: number): void {
    this.renewing = false;
    if (this.renewEvery !== null) this.nextRenewal = now + Math.max(this.renewEvery / 4, MIN_RETRY);
  }
}
