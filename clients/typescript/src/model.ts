/** Plain records of what the server answers: grants, leaders, live leases. */

/** An acquire's answer: the fence, the server's clock just after the grant, and when the server started the statement. */
export interface Grant {
  fence: bigint;
  serverNow: Date;
  statementStart: Date;
}

/** A try that found the key held: ms until the blocking lease expires by itself (null: only a release frees it). */
export interface Busy {
  busy: true;
  retryAfter: number | null;
}

export const isBusy = (value: unknown): value is Busy =>
  typeof value === 'object' && value !== null && (value as { busy?: unknown }).busy === true;

/** Milliseconds from the server receiving the statement to the grant (waits included). */
export const serverElapsed = (grant: Grant): number => Math.max(grant.serverNow.getTime() - grant.statementStart.getTime(), 0);

/** An acquire's row `(fence or NULL, server clock, statement start)`, which says nothing about when to retry. */
export function acquired(row: unknown[]): Grant | Busy {
  if (row[0] === null) return { busy: true, retryAfter: null };
  return { fence: row[0] as bigint, serverNow: row[1] as Date, statementStart: row[2] as Date };
}

/** A try's row: a grant, or when to try again (its fourth column, seconds). */
export function tried(row: unknown[]): Grant | Busy {
  const grant = acquired(row);
  if (!isBusy(grant)) return grant;
  const seconds = row[3] as number | null | undefined;
  // Negative would be the server's rounding: retry at once.
  return { busy: true, retryAfter: seconds === null || seconds === undefined ? null : Math.max(seconds * 1000, 0) };
}

/** The current leader of an election, as `dlock_leader` shows it (never the candidate string). */
export interface Leader {
  /** What the leader published about itself when it campaigned (null if nothing). */
  info: string | null;
  /** The leader's term: the fence of its lease, greater than every earlier leader's. */
  term: bigint;
  /** When it became leader (server clock). */
  since: Date;
  /** When its lead ends unless renewed (server clock); null if bound to its session. */
  expiresAt: Date | null;
}

/** A live lease as `dlock_locks` shows it. */
export interface LiveLease {
  key: string;
  /** The owner, if the lease is the caller's role's (or the caller is an admin); null otherwise. */
  owner: string | null;
  fence: bigint;
  holdCount: number;
  /** When the lease ends unless renewed (server clock); null if session-bound. */
  expiresAt: Date | null;
  holderRole: string | null;
  /** How many sessions wait on the key on the server. */
  waiters: number;
  mode: 'exclusive' | 'shared';
}
