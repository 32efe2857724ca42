/** Taking a lock: one acquire statement, or a wait made of tries (see `waiting.ts`). */
import type pg from 'pg';

import { UnsupportedError } from './errors.js';
import { Lease, type LeaseHome, MultiLease } from './lease.js';
import { type Busy, type Grant, acquired, isBusy, tried } from './model.js';
import { type Request, trying, waiting } from './request.js';
import { renewalInterval } from './schedule.js';
import type { Statements } from './sql.js';
import { type Waits, now, retry } from './waiting.js';

/** What taking a lock needs of its client. */
export interface LockHome extends LeaseHome {
  readonly waits: Waits;
  statements(): Promise<Statements>;
}

/** How a single-key lock is taken and kept (durations in ms). */
export interface Taking {
  request: Request;
  /** null: without limit; 0: one try. */
  wait: number | null;
  watchdog: boolean;
  renewEvery: number | null;
}

export const SESSION_BOUND_BEHIND_POOLER =
  'a session-bound lease through a transaction pooler: its session would be whichever server ' +
  'connection the pooler lent for the call, which neither ends with this client nor carries its ' +
  'later calls; give the lease a ttl';

/** Takes the lock if it can (within the wait): null when another owner keeps the key. */
export async function tryAcquire(home: LockHome, taking: Taking): Promise<Lease | null> {
  const { request } = taking;
  if (request.ttl === null && home.connections.transactionPooler) throw new UnsupportedError(SESSION_BOUND_BEHIND_POOLER);
  const statements = await home.statements();
  if (taking.wait === 0) {
    const [sql, params] = waiting(request, statements, 0);
    const answer = await send(home, taking, statements, sql, params, acquired);
    return isBusy(answer) ? null : answer;
  }
  const deadline = taking.wait === null ? null : now() + taking.wait;
  const waits = home.waits;
  const attempt = (settle: number | null): Promise<Lease | Busy> => {
    const [sql, params] = trying(request, statements, settle);
    return send(home, taking, statements, sql, params, tried);
  };
  // Nobody of ours in line for the key: one try is all it takes when it is free.
  if (!waits.hasLine(request.key)) {
    const answer = await attempt(waits.settle(deadline));
    if (!isBusy(answer)) return answer;
  }
  const line = waits.enter(request.key);
  try {
    return await waits.wait(line, deadline, statements, attempt);
  } finally {
    waits.leave(line, statements);
  }
}

/** One acquire statement on a pooled connection; a session-bound grant keeps it. */
async function send(
  home: LockHome,
  taking: Taking,
  statements: Statements,
  sql: string,
  params: unknown[],
  parse: (row: unknown[]) => Grant | Busy,
): Promise<Lease | Busy> {
  const { request } = taking;
  const connections = home.connections;
  const connection: pg.PoolClient = await connections.take();
  let kept = false;
  try {
    const sent = now();
    const answer = parse((await connections.run(connection, sql, params))[0] as unknown[]);
    if (isBusy(answer)) return answer;
    const sessionBound = request.ttl === null;
    const renewEvery = request.ttl !== null && taking.watchdog ? renewalInterval(request.ttl, taking.renewEvery) : null;
    const lease = new Lease(home, statements, request.owner, request.key, answer, request.ttl, sent, renewEvery, sessionBound ? connection : null);
    kept = sessionBound;
    return lease;
  } finally {
    if (!kept) connections.giveBack(connection);
  }
}

/** How a multi-key lock is taken and kept (durations in ms). */
export interface TakingAll {
  keys: string[];
  owner: string;
  ttl: number;
  wait: number | null;
  watchdog: boolean;
  renewEvery: number | null;
  lockDelay: number;
}

/**
 * Takes every key if it can (within the wait): null when some key stays held. A wait waits in
 * the server's queue, holding one pooled connection for its length; behind a transaction pooler
 * it retries, holding no server connection between tries.
 */
export async function tryAcquireAll(home: LockHome, taking: TakingAll): Promise<MultiLease | null> {
  const statements = await home.statements();
  if (taking.wait !== 0 && home.connections.transactionPooler) {
    const deadline = taking.wait === null ? null : now() + taking.wait;
    return retry(deadline, home.waits.maxPollInterval, () => sendAll(home, taking, statements, 0));
  }
  const answer = await sendAll(home, taking, statements, taking.wait);
  return isBusy(answer) ? null : answer;
}

async function sendAll(home: LockHome, taking: TakingAll, statements: Statements, wait: number | null): Promise<MultiLease | Busy> {
  const sent = now();
  const row = await home.connections.one(statements.acquireAll, [
    taking.keys,
    taking.owner,
    taking.ttl / 1000,
    wait === null ? null : wait / 1000,
    taking.lockDelay / 1000,
  ]);
  const fences = row[0] as bigint[] | null;
  if (fences === null) return { busy: true, retryAfter: null };
  const grant: Grant = { fence: fences[0] as bigint, serverNow: row[1] as Date, statementStart: row[2] as Date };
  const renewEvery = taking.watchdog ? renewalInterval(taking.ttl, taking.renewEvery) : null;
  return new MultiLease(home, statements, taking.owner, [...taking.keys], fences, grant, taking.ttl, sent, renewEvery);
}
