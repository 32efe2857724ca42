//! Every SQL statement dlock runs against the lease table, `dlock_internal.lease`, run as the
//! table's owner (dlock's functions run as their caller, who may not touch it). Callers hold
//! the key lock of any key they change, so no two transactions ever write the same row at once.

use crate::pg::role;
use crate::pg::spi::{self, Spi, Statement, arg};
use crate::store::relation;
use crate::store::row::NewLease;
use dlock_core::Timestamp;
use dlock_core::lease::Lease;
use pgrx::FromDatum;
use pgrx::pg_sys::{self, Oid};

const TEXT: Oid = pg_sys::TEXTOID;
const OID: Oid = pg_sys::OIDOID;
const INT4: Oid = pg_sys::INT4OID;
const INT8: Oid = pg_sys::INT8OID;
const TSTZ: Oid = pg_sys::TIMESTAMPTZOID;

static READ: Statement = Statement {
    sql: "SELECT owner, role, fence, hold_count, acquired_at, expires_at, holder_pid \
          FROM dlock_internal.lease WHERE key = $1",
    args: &[TEXT],
};

// One statement for a new key and for taking over a dead row; the fence comes from a
// WAL-logged sequence, so it only ever grows, across crashes, restarts and failover.
static GRANT: Statement = Statement {
    sql: "INSERT INTO dlock_internal.lease AS l \
            (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid) \
          VALUES ($1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, $4, $5, $6) \
          ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, role = excluded.role, \
            fence = excluded.fence, hold_count = 1, acquired_at = excluded.acquired_at, \
            expires_at = excluded.expires_at, holder_pid = excluded.holder_pid \
          RETURNING l.fence",
    args: &[TEXT, TEXT, OID, TSTZ, TSTZ, INT4],
};

// The common case in one statement: a free key is granted at once. On a conflict nothing is
// written or locked (DO NOTHING), so a failed try stays read-only and needs no commit flush;
// the caller then reads the row to decide. (The fence sequence advances even then: fences
// need only grow, not be dense.)
static TRY_GRANT: Statement = Statement {
    sql: "INSERT INTO dlock_internal.lease AS l \
            (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid) \
          VALUES ($1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, $4, $5, $6) \
          ON CONFLICT (key) DO NOTHING \
          RETURNING l.fence",
    args: &[TEXT, TEXT, OID, TSTZ, TSTZ, INT4],
};

// The common release in one statement: the last hold of a live TTL lease by its own role.
static RELEASE_LAST_HOLD: Statement = Statement {
    sql: "DELETE FROM dlock_internal.lease \
          WHERE key = $1 AND owner = $2 AND role = $3 AND hold_count = 1 \
            AND expires_at > $4 AND expires_at < 'infinity'",
    args: &[TEXT, TEXT, OID, TSTZ],
};

static REENTER: Statement = Statement {
    sql: "UPDATE dlock_internal.lease SET hold_count = hold_count + 1, expires_at = $2, holder_pid = $3 \
          WHERE key = $1",
    args: &[TEXT, TSTZ, INT4],
};

static SET_EXPIRY: Statement =
    Statement { sql: "UPDATE dlock_internal.lease SET expires_at = $2 WHERE key = $1", args: &[TEXT, TSTZ] };

static DECREMENT: Statement = Statement {
    sql: "UPDATE dlock_internal.lease SET hold_count = hold_count - 1 WHERE key = $1",
    args: &[TEXT],
};

static DELETE: Statement =
    Statement { sql: "DELETE FROM dlock_internal.lease WHERE key = $1", args: &[TEXT] };

static KEYS_OF_OWNER: Statement = Statement {
    sql: "SELECT key FROM dlock_internal.lease WHERE owner = $1 AND ($2 IS NULL OR role = $2) ORDER BY key",
    args: &[TEXT, OID],
};

static PAGE_COUNT: Statement = Statement {
    sql: "SELECT pg_catalog.pg_relation_size('dlock_internal.lease'::pg_catalog.regclass) \
          / pg_catalog.current_setting('block_size')::pg_catalog.int8",
    args: &[],
};

// One heap page: a TID range scan reads exactly that page, whatever the table's size (the
// caller disables sequential scans while it runs, so a plan made on an empty table stays right).
static EXPIRED_ON_PAGE: Statement = Statement {
    sql: "SELECT key FROM dlock_internal.lease \
          WHERE ctid >= pg_catalog.format('(%s,0)', $1)::pg_catalog.tid \
            AND ctid < pg_catalog.format('(%s,0)', $1 + 1)::pg_catalog.tid \
            AND expires_at <= $2",
    args: &[INT8, TSTZ],
};

// The partial index on session-bound rows makes this a short scan from `$1` on.
static SESSION_BOUND_KEYS: Statement = Statement {
    sql: "SELECT key, fence FROM dlock_internal.lease \
          WHERE expires_at = 'infinity' AND key > $1 ORDER BY key LIMIT $2",
    args: &[TEXT, INT8],
};

static ALL: Statement = Statement {
    sql: "SELECT key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid \
          FROM dlock_internal.lease ORDER BY key",
    args: &[],
};

static WAITERS: Statement = Statement {
    sql: "SELECT (classid::pg_catalog.int8 << 32) | objid::pg_catalog.int8, pg_catalog.count(*)::pg_catalog.int4 \
          FROM pg_catalog.pg_locks \
          WHERE locktype = 'advisory' AND database = $1 AND objsubid = $2 GROUP BY 1",
    args: &[OID, pg_sys::INT2OID],
};

/// Runs dlock's statements as the lease table's owner.
fn as_owner<R>(f: impl FnOnce() -> R) -> R {
    match relation::relations() {
        Some(relations) => role::as_owner(relations.owner, f),
        None => pgrx::error!("dlock: the extension's tables are missing in this database"),
    }
}

fn query<T>(
    spi: &Spi,
    stmt: &'static Statement,
    args: &[Option<pg_sys::Datum>],
    f: impl FnMut(&spi::Row) -> T,
) -> Vec<T> {
    as_owner(|| spi.query(stmt, args, f))
}

fn execute(spi: &Spi, stmt: &'static Statement, args: &[Option<pg_sys::Datum>]) -> u64 {
    as_owner(|| spi.execute(stmt, args))
}

/// Column `n` of a row that must not be NULL: a NULL or a value of another type means the table
/// is not what dlock made, which is an internal error, never a lease with fence 0.
fn required<T: FromDatum>(row: &spi::Row, n: i32, column: &str) -> T {
    row.get(n).unwrap_or_else(|| {
        pgrx::error!("dlock: internal error: dlock_internal.lease.{column} is NULL or not of its type")
    })
}

fn lease_from(row: &spi::Row, first: i32) -> Lease {
    let col = |i: i32| first + i;
    Lease {
        owner: required(row, col(0), "owner"),
        role: required::<Oid>(row, col(1), "role").to_u32(),
        fence: required(row, col(2), "fence"),
        hold_count: required(row, col(3), "hold_count"),
        acquired_at: required(row, col(4), "acquired_at"),
        expires_at: required(row, col(5), "expires_at"),
        holder_pid: required(row, col(6), "holder_pid"),
    }
}

/// The row of `key`, if any.
pub fn read(spi: &Spi, key: &str) -> Option<Lease> {
    query(spi, &READ, &[arg(key)], |row| lease_from(row, 1)).pop()
}

fn write(spi: &Spi, stmt: &'static Statement, new: &NewLease) -> Option<i64> {
    let args = [
        arg(new.key),
        arg(new.owner),
        arg(Oid::from(new.role)),
        arg(new.acquired_at),
        arg(new.expires_at),
        arg(new.holder_pid),
    ];
    query(spi, stmt, &args, |row| required::<i64>(row, 1, "fence")).pop()
}

/// Writes a new lease (inserting, or replacing a dead row); returns its fence.
pub fn grant(spi: &Spi, new: &NewLease) -> i64 {
    write(spi, &GRANT, new).expect("INSERT .. RETURNING gave a fence")
}

/// Writes a new lease if its key has no row; the fence, or `None` when there is one.
pub fn try_grant(spi: &Spi, new: &NewLease) -> Option<i64> {
    write(spi, &TRY_GRANT, new)
}

/// Deletes a live TTL lease with one hold left, if `owner` and `role` hold it; whether it did.
pub fn release_last_hold(spi: &Spi, key: &str, owner: &str, role: u32, now: Timestamp) -> bool {
    execute(spi, &RELEASE_LAST_HOLD, &[arg(key), arg(owner), arg(Oid::from(role)), arg(now)]) == 1
}

/// One more hold of a lease by its holder.
pub fn reenter(spi: &Spi, key: &str, expires_at: Timestamp, pid: i32) {
    execute(spi, &REENTER, &[arg(key), arg(expires_at), arg(pid)]);
}

/// Sets the expiry of a lease.
pub fn set_expiry(spi: &Spi, key: &str, expires_at: Timestamp) {
    execute(spi, &SET_EXPIRY, &[arg(key), arg(expires_at)]);
}

/// One hold fewer.
pub fn decrement(spi: &Spi, key: &str) {
    execute(spi, &DECREMENT, &[arg(key)]);
}

/// Removes the row of `key`.
pub fn delete(spi: &Spi, key: &str) {
    execute(spi, &DELETE, &[arg(key)]);
}

/// Keys with a row for `owner`, of `role` only unless `None` (admins), in key order.
pub fn keys_of_owner(spi: &Spi, owner: &str, role: Option<u32>) -> Vec<String> {
    let role = role.map(Oid::from);
    query(spi, &KEYS_OF_OWNER, &[arg(owner), arg(role)], |row| required::<String>(row, 1, "key"))
}

/// Pages of the lease table.
pub fn page_count(spi: &Spi) -> i64 {
    query(spi, &PAGE_COUNT, &[], |row| row.get::<i64>(1)).pop().flatten().unwrap_or(0)
}

/// Keys on heap page `page` whose TTL ran out by `now`, with sequential scans disabled until the
/// caller's GUC nest level closes, so the statement is always planned as a TID range scan.
pub fn expired_on_page_without_seqscan(spi: &Spi, page: i64, now: Timestamp) -> Vec<String> {
    // SAFETY: the caller opened a GUC nest level (`guc::nested`).
    unsafe { crate::pg::guc::set_saved(c"enable_seqscan", "off") };
    query(spi, &EXPIRED_ON_PAGE, &[arg(page), arg(now)], |row| required::<String>(row, 1, "key"))
}

/// Up to `limit` session-bound keys after `after` in key order, with their fences.
pub fn session_bound_keys(spi: &Spi, after: &str, limit: i64) -> Vec<(String, i64)> {
    query(spi, &SESSION_BOUND_KEYS, &[arg(after), arg(limit)], |row| {
        (required::<String>(row, 1, "key"), required::<i64>(row, 2, "fence"))
    })
}

/// Every row, in key order.
pub fn all(spi: &Spi) -> Vec<(String, Lease)> {
    query(spi, &ALL, &[], |row| (required::<String>(row, 1, "key"), lease_from(row, 2)))
}

/// Waiting sessions per key hash in this database: holders and waiters of queue locks.
pub fn waiters(spi: &Spi, database: Oid, space: u16) -> Vec<(u64, i32)> {
    spi.query(&WAITERS, &[arg(database), arg(space as i16)], |row| {
        (required::<i64>(row, 1, "waiters' key") as u64, required::<i32>(row, 2, "waiters"))
    })
}
