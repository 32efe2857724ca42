/**
 * The errors of the client, and the one place where SQLSTATEs are mapped to them.
 *
 * Every error the client raises for the server is a {@link DlockError}; those that come from the
 * server keep its SQLSTATE (`sqlstate`), detail and hint, and the driver's error as `cause`.
 * Bad arguments are refused before any round trip with the language's own errors, `TypeError`
 * (wrong type) and `RangeError` (wrong value), carrying `code = 'ERR_DLOCK_INVALID_ARGUMENT'`
 * and the SQLSTATE the server would answer.
 */

/** Anything that went wrong taking, keeping or giving back a lock. */
export class DlockError extends Error {
  /** The five-character SQLSTATE of a server error; undefined for other conditions. */
  readonly sqlstate: string | undefined;
  /** The server's DETAIL line, if any. */
  readonly detail: string | undefined;
  /** The server's HINT line, if any. */
  readonly hint: string | undefined;

  constructor(message: string, options: { sqlstate?: string; detail?: string; hint?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.sqlstate = options.sqlstate;
    this.detail = options.detail;
    this.hint = options.hint;
  }
}

/** Another owner holds the key: at once (no wait was asked for) or until the wait ran out. */
export class NotAcquiredError extends DlockError {
  /** Whether a wait was asked for (and elapsed), as opposed to a single try. */
  readonly waited: boolean;
  constructor(readonly key: string, waited: boolean) {
    super(waited ? `not acquired: the wait ran out before ${JSON.stringify(key)} was free` : `not acquired: another owner holds ${JSON.stringify(key)}`);
    this.waited = waited;
  }
}

/** The lease was lost (expired, force-released, or not renewed in time) while it was in use. */
export class LeaseLostError extends DlockError {}
/** An argument the server refused (SQLSTATE 22023, or 22004 for a missing one). */
export class InvalidArgumentError extends DlockError {}
/** The owner holds the key in the other mode (SQLSTATE 0A000): no silent upgrade or downgrade. */
export class ModeConflictError extends DlockError {}
/** The role may not do this (SQLSTATE 42501): another role's lease, or a force release by a non-admin. */
export class PermissionDeniedError extends DlockError {}
/** A wait for a key to be free on a key the waiting server session holds itself (55006). */
export class HeldHereError extends DlockError {}
/** The statement was cancelled or ran into `statement_timeout` (SQLSTATE 57014). */
export class QueryCanceledError extends DlockError {}
/** PostgreSQL's deadlock detector chose this waiter (SQLSTATE 40P01). */
export class DeadlockError extends DlockError {}
/** Any other error the server raised; `sqlstate` says which. */
export class ServerError extends DlockError {}
/** No usable connection: connecting, the pool, or a connection that broke mid-call. */
export class ConnectionFailedError extends DlockError {}
/** The dlock extension is not installed in the database the client connects to. */
export class NotInstalledError extends DlockError {}
/** The client cannot do this in its mode (e.g. a session-bound lease through a transaction pooler). */
export class UnsupportedError extends DlockError {}

/** The `code` of the TypeError or RangeError thrown for a bad argument before any round trip. */
export const INVALID_ARGUMENT = 'ERR_DLOCK_INVALID_ARGUMENT';

/** A bad argument: a `RangeError` (or `TypeError`) with the SQLSTATE the server would answer. */
export function badArgument(message: string, kind: 'type' | 'range' = 'range', sqlstate = '22023'): Error {
  const error = kind === 'type' ? new TypeError(`dlock: ${message}`) : new RangeError(`dlock: ${message}`);
  Object.assign(error, { code: INVALID_ARGUMENT, sqlstate });
  return error;
}

const BY_SQLSTATE: Record<string, new (message: string, options: object) => DlockError> = {
  '22023': InvalidArgumentError,
  '22004': InvalidArgumentError,
  '0A000': ModeConflictError,
  '42501': PermissionDeniedError,
  '55006': HeldHereError,
  '57014': QueryCanceledError,
  '40P01': DeadlockError,
};

interface DriverError {
  code?: unknown;
  message?: unknown;
  detail?: unknown;
  hint?: unknown;
}

/** The {@link DlockError} for an error of `pg` (or anything thrown while talking to the server). */
export function fromDriver(error: unknown): DlockError {
  if (error instanceof DlockError) return error;
  const e = (typeof error === 'object' && error !== null ? error : {}) as DriverError;
  const message = typeof e.message === 'string' ? e.message : String(error);
  const sqlstate = typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) ? e.code : undefined;
  if (sqlstate === undefined) {
    // No SQLSTATE: I/O, a closed connection, a pool that timed out.
    return new ConnectionFailedError(`connection: ${message}`, { cause: error });
  }
  const options = {
    sqlstate,
    detail: typeof e.detail === 'string' ? e.detail : undefined,
    hint: typeof e.hint === 'string' ? e.hint : undefined,
    cause: error,
  };
  const Kind = BY_SQLSTATE[sqlstate];
  if (Kind !== undefined) return new Kind(message, options);
  // Class 08 (connection), 28 (authorization), 57P (shutdown, terminated backend): a new
  // session may work.
  if (/^(08|28|57P)/.test(sqlstate)) return new ConnectionFailedError(`connection: ${message}`, options);
  return new ServerError(message, options);
}

/** Whether the same call may succeed later: connection trouble, not a refusal. */
export function isTransient(error: unknown): boolean {
  return error instanceof ConnectionFailedError;
}
