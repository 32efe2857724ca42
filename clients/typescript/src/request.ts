/**
 * What a single-key acquire asks for -- an exclusive lease, a shared one (or a semaphore's
 * permit), or an election's lead -- and the statement and parameters that take it.
 */
import type { Statements } from './sql.js';

export type Kind = 'exclusive' | 'shared' | 'leader';

/** One acquire, its arguments already checked (durations in ms). */
export interface Request {
  key: string;
  owner: string;
  kind: Kind;
  /** null: session-bound. */
  ttl: number | null;
  /** A semaphore's size (shared leases only; null: no limit). */
  permits: number | null;
  /** What an election's leader publishes. */
  info: string | null;
  lockDelay: number;
}

const sec = (ms: number | null): number | null => (ms === null ? null : ms / 1000);

/** The statement that waits up to `wait` ms on the server (null: no limit). */
export function waiting(r: Request, s: Statements, wait: number | null): [string, unknown[]] {
  const [k, o, t, w, d] = [r.key, r.owner, sec(r.ttl), sec(wait), sec(r.lockDelay)];
  if (r.kind === 'shared') return [s.acquireShared, [k, o, t, w, r.permits, d]];
  if (r.kind === 'leader') return [s.campaign, [k, o, t, r.info, w, d]];
  if (r.lockDelay > 0) return [s.acquireDelayed, [k, o, t, w, d]];
  // Exclusive leases without a lock-delay keep version 1's call, which every server has.
  return [s.acquire, [k, o, t, w]];
}

/**
 * One try that never queues, then when to try again. Only the exclusive try waits up to
 * `settle` ms (null: no limit) for a transaction that is changing the key.
 */
export function trying(r: Request, s: Statements, settle: number | null): [string, unknown[]] {
  const [k, o, t, d] = [r.key, r.owner, sec(r.ttl), sec(r.lockDelay)];
  if (r.kind === 'shared') return [s.tryShared, [k, o, t, r.permits, d]];
  if (r.kind === 'leader') return [s.tryCampaign, [k, o, t, r.info, d]];
  if (r.lockDelay > 0) return [s.tryDelayed, [k, o, t, d]];
  return [s.tryAcquire, [k, o, t, sec(settle)]];
}
