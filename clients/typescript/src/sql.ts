/**
 * Every statement the client sends, each calling into the extension's schema by name.
 *
 * Unqualified calls would resolve through the caller's `search_path`, where anyone who may
 * create objects in `public` can plant a `public.dlock_acquire(...)` that captures them. So the
 * client finds the schema the extension lives in once ({@link FIND}) and writes it, quoted as an
 * identifier, into its statements; values always travel as `$n` parameters, each cast to its
 * type in the text. Whatever else the statements use is `pg_catalog`'s, named so. The texts
 * are those of the Rust client (`clients/rust/src/statements`), each numbering only the parameters it uses.
 * Durations travel as seconds (`float8`), so that NULL (a session-bound ttl, an endless wait)
 * passes through unchanged.
 */

/** The database's name, and the schema of its `dlock` extension (NULL if not installed). */
export const FIND =
  'SELECT pg_catalog.current_database()::pg_catalog.text, ' +
  'COALESCE((SELECT n.nspname::pg_catalog.text ' +
  'FROM pg_catalog.pg_extension e ' +
  'JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace ' +
  "WHERE e.extname OPERATOR(pg_catalog.=) 'dlock'::pg_catalog.name), " +
  "(SELECT n.nspname::pg_catalog.text " +
  "FROM pg_catalog.pg_proc p " +
  "JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace " +
  "JOIN pg_catalog.pg_namespace i ON i.nspowner OPERATOR(pg_catalog.=) p.proowner " +
  "WHERE i.nspname OPERATOR(pg_catalog.=) 'dlock_internal'::pg_catalog.name " +
  "AND p.proname OPERATOR(pg_catalog.=) 'dlock_acquire'::pg_catalog.name " +
  "AND n.nspname OPERATOR(pg_catalog.<>) 'dlock_internal'::pg_catalog.name " +
  "ORDER BY n.nspname LIMIT 1))";

/** `name` as an SQL identifier: always double-quoted, inner quotes doubled. */
export const quoteIdentifier = (name: string): string => `"${name.replaceAll('"', '""')}"`;

const seconds = (parameter: string): string => `pg_catalog.make_interval(secs => ${parameter}::pg_catalog.float8)`;
const CLOCKS = 'pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp()';
const KEY = '$1::pg_catalog.text';
const OWNER = '$2::pg_catalog.text';
const TTL = seconds('$3');
const NO_WAIT = "'0 seconds'::pg_catalog.interval";

/**
 * The statements of one database, qualified with the schema its extension lives in. Unless said
 * otherwise the parameters are `(key, owner, ttl seconds, ...)` and the acquire statements answer
 * `(fence or NULL, server clock after the grant, statement start)`.
 */
export class Statements {
  /** (key, owner, ttl, wait): `dlock_acquire` waiting up to `wait` on the server. */
  readonly acquire: string;
  /** (key, owner, ttl, settle): one try that never queues; then seconds until the blocking lease expires. */
  readonly tryAcquire: string;
  /** (key, owner, ttl, wait, lock_delay). */
  readonly acquireDelayed: string;
  /** (key, owner, ttl, lock_delay): one try, then when to try again. */
  readonly tryDelayed: string;
  /** (key, owner, ttl, wait, max_holders, lock_delay): a shared lease (or a permit). */
  readonly acquireShared: string;
  /** (key, owner, ttl, max_holders, lock_delay): one try, then when to try again. */
  readonly tryShared: string;
  /** (election, candidate, ttl, info, wait, lock_delay): the term. */
  readonly campaign: string;
  /** (election, candidate, ttl, info, lock_delay): one try, then when to try again. */
  readonly tryCampaign: string;
  /** (keys, owner, ttl, wait, lock_delay): every key or none; the fences in key order. */
  readonly acquireAll: string;
  /** (key, owner, ttl): the new expiry, or NULL if no longer ours ('infinity' if session-bound). */
  readonly renew: string;
  /** (key, owner): whether the lease was still ours. */
  readonly release: string;
  /** (key, fence): whether a live lease of the key carries the fence. */
  readonly holds: string;
  /** (keys, fences): whether every key's live lease still carries its fence. */
  readonly holdsAll: string;
  /** (key): whether the key was held (dlock_admin members and superusers only). */
  readonly forceRelease: string;
  /** (election): info, term, since, expires_at (NULL when infinite); no row if nobody leads. */
  readonly leader: string;
  /** (key): whether the key is free now, and if not, when its earliest lease expires. */
  readonly isFree: string;
  /** (key): LISTEN for the key's release on this session; the channel. */
  readonly watch: string;
  /** (key): stop that. */
  readonly unwatch: string;
  /** (): the live leases, `expires_at` NULL for session-bound ones. */
  readonly locks: string;

  constructor(readonly schema: string) {
    const s = quoteIdentifier(schema);
    // A try that finds a key busy says when to try again: seconds until the earliest expiry of
    // the key's live TTL leases (a release or a session's end notifies instead), or NULL.
    const retryAfter =
      "(SELECT pg_catalog.date_part('epoch', pg_catalog.min(l.expires_at) " +
      'OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) ' +
      `FROM ${s}.dlock_locks AS l ` +
      `WHERE l.key OPERATOR(pg_catalog.=) ${KEY} AND pg_catalog.isfinite(l.expires_at))`;
    const trying = (call: string) => `SELECT t.f, ${CLOCKS}, CASE WHEN t.f IS NULL THEN ${retryAfter} END FROM ${call} AS t(f)`;
    const waiting = (call: string) => `SELECT ${call}, ${CLOCKS}`;
    const delayed = (wait: string, delay: string) => `${s}.dlock_acquire(${KEY}, ${OWNER}, ${TTL}, ${wait}, ${delay})`;
    const shared = (wait: string, permits: string, delay: string) =>
      `${s}.dlock_acquire_shared(${KEY}, ${OWNER}, ${TTL}, ${wait}, ${permits}::pg_catalog.int4, ${delay})`;
    const campaign = (info: string, wait: string, delay: string) =>
      `${s}.dlock_campaign(${KEY}, ${OWNER}, ${TTL}, ${info}::pg_catalog.text, ${wait}, ${delay})`;

    this.acquire = `SELECT ${s}.dlock_acquire(${KEY}, ${OWNER}, ${TTL}, ${seconds('$4')}), ${CLOCKS}`;
    this.tryAcquire =
      `SELECT t.fence, ${CLOCKS}, pg_catalog.date_part('epoch', t.retry_after) ` +
      `FROM ${s}.dlock_try_acquire(${KEY}, ${OWNER}, ${TTL}, ${seconds('$4')}) AS t`;
    this.acquireDelayed = waiting(delayed(seconds('$4'), seconds('$5')));
    this.tryDelayed = trying(delayed(NO_WAIT, seconds('$4')));
    this.acquireShared = waiting(shared(seconds('$4'), '$5', seconds('$6')));
    this.tryShared = trying(shared(NO_WAIT, '$4', seconds('$5')));
    this.campaign = waiting(campaign('$4', seconds('$5'), seconds('$6')));
    this.tryCampaign = trying(campaign('$4', NO_WAIT, seconds('$5')));
    this.acquireAll =
      `SELECT ${s}.dlock_acquire_all($1::pg_catalog.text[], ${OWNER}, ${TTL}, ${seconds('$4')}, ${seconds('$5')}), ${CLOCKS}`;
    this.renew = `SELECT ${s}.dlock_renew(${KEY}, ${OWNER}, ${TTL})`;
    this.release = `SELECT ${s}.dlock_release(${KEY}, ${OWNER})`;
    this.holds = `SELECT ${s}.dlock_holds(${KEY}, $2::pg_catalog.int8)`;
    this.holdsAll =
      'SELECT pg_catalog.bool_and(h) ' +
      'FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.int8[])) ' +
      `AS t(k, f), LATERAL ${s}.dlock_holds(t.k, t.f) AS h`;
    this.forceRelease = `SELECT ${s}.dlock_force_release(${KEY})`;
    this.leader =
      'SELECT l.info, l.term, l.since, CASE WHEN pg_catalog.isfinite(l.expires_at) THEN l.expires_at END ' +
      `FROM ${s}.dlock_leader(${KEY}) AS l`;
    this.isFree = `SELECT ${s}.dlock_wait_free(${KEY}, ${NO_WAIT}), ${retryAfter}`;
    this.watch = `SELECT ${s}.dlock_watch(${KEY})`;
    this.unwatch = `SELECT ${s}.dlock_unwatch(${KEY})`;
    this.locks =
      'SELECT key, owner, fence, hold_count::pg_catalog.int8, ' +
      'CASE WHEN pg_catalog.isfinite(expires_at) THEN expires_at END, ' +
      'holder_role::pg_catalog.text, waiters::pg_catalog.int8, mode ' +
      `FROM ${s}.dlock_locks ORDER BY key`;
  }
}
