//! Every SQL statement dlock runs against the lease table, `dlock_internal.lease`, run as the
//! table's owner (dlock's functions run as their caller, who may not touch it). The table has a
//! row per holder of a key, keyed by (key, owner). Callers hold the key lock of any key they
//! change, so no two transactions ever write a key's rows at once.

use crate::pg::role;
use crate::pg::spi::{self, Spi, Statement, arg};
use crate::store::relation;
use crate::store::row::NewLease;
use dlock_core::lease::{Kind, Lease};
use dlock_core::{Micros, Timestamp};
use pgrx::datum::Interval;
use pgrx::pg_sys::{self, Oid};
use pgrx::{FromDatum, IntoDatum};

const TEXT: Oid = pg_sys::TEXTOID;
const OID: Oid = pg_sys::OIDOID;
const INT4: Oid = pg_sys::INT4OID;
const INT8: Oid = pg_sys::INT8OID;
const TSTZ: Oid = pg_sys::TIMESTAMPTZOID;
const CHAR: Oid = pg_sys::CHAROID;

static READ: Statement = Statement {
    sql: concat!(
        "SELECT ",
        "owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, kind, \
         max_holders, (pg_catalog.extract('epoch'::pg_catalog.text, lock_delay) OPERATOR(pg_catalog.*) 1000000::pg_catalog.numeric)::pg_catalog.int8, info",
        " FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 ORDER BY fence"
    ),
    args: &[TEXT],
};

// A new lease (or one replacing a dead lease of the same owner); the fence comes from a
// WAL-logged sequence, so it only ever grows, across crashes, restarts and failover.
static GRANT: Statement = Statement {
    sql: "INSERT INTO dlock_internal.lease AS l \
            (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, kind, max_holders, \
             lock_delay, info) \
          VALUES ($1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, $4, $5, $6, \
                  $7, $8, $9::pg_catalog.float8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval, $10) \
          ON CONFLICT (key, owner) DO UPDATE SET role = excluded.role, fence = excluded.fence, hold_count = 1, \
            acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, holder_pid = excluded.holder_pid, \
            kind = excluded.kind, max_holders = excluded.max_holders, lock_delay = excluded.lock_delay, \
            info = excluded.info \
          RETURNING l.fence",
    args: &[TEXT, TEXT, OID, TSTZ, TSTZ, INT4, CHAR, INT4, INT8, TEXT],
};

// The common case in one statement: a key with no row at all is granted at once. Otherwise
// nothing is written (a failed try stays read-only and needs no commit flush); the caller then
// reads the rows to decide. (The fence sequence does not advance then.)
static TRY_GRANT: Statement = Statement {
    sql: "INSERT INTO dlock_internal.lease AS l \
            (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, kind, max_holders, \
             lock_delay, info) \
          SELECT $1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, $4, $5, $6, \
                 $7, $8, $9::pg_catalog.float8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval, $10 \
           WHERE NOT EXISTS (SELECT FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1) \
          RETURNING l.fence",
    args: &[TEXT, TEXT, OID, TSTZ, TSTZ, INT4, CHAR, INT4, INT8, TEXT],
};

// The common release in one statement: the last hold of a live TTL lease by its own role.
static RELEASE_LAST_HOLD: Statement = Statement {
    sql: "DELETE FROM dlock_internal.lease \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2 \
            AND role OPERATOR(pg_catalog.=) $3 AND hold_count OPERATOR(pg_catalog.=) 1 \
            AND expires_at OPERATOR(pg_catalog.>) $4 \
            AND expires_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz \
            AND ($5 IS NULL OR kind OPERATOR(pg_catalog.=) $5) \
          RETURNING kind",
    args: &[TEXT, TEXT, OID, TSTZ, CHAR],
};

static REENTER: Statement = Statement {
    sql: "UPDATE dlock_internal.lease \
          SET hold_count = hold_count OPERATOR(pg_catalog.+) 1, expires_at = $3, holder_pid = $4 \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
    args: &[TEXT, TEXT, TSTZ, INT4],
};

static SET_EXPIRY: Statement = Statement {
    sql: "UPDATE dlock_internal.lease SET expires_at = $3 \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
    args: &[TEXT, TEXT, TSTZ],
};

static DECREMENT: Statement = Statement {
    sql: "UPDATE dlock_internal.lease SET hold_count = hold_count OPERATOR(pg_catalog.-) 1 \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
    args: &[TEXT, TEXT],
};

static DELETE: Statement = Statement {
    sql: "DELETE FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
    args: &[TEXT, TEXT],
};

static KEYS_OF_OWNER: Statement = Statement {
    sql: "SELECT key FROM dlock_internal.lease \
          WHERE owner OPERATOR(pg_catalog.=) $1 AND ($2 IS NULL OR role OPERATOR(pg_catalog.=) $2) ORDER BY key",
    args: &[TEXT, OID],
};

static PAGE_COUNT: Statement = Statement {
    sql: "SELECT pg_catalog.pg_relation_size('dlock_internal.lease'::pg_catalog.regclass) \
          OPERATOR(pg_catalog./) pg_catalog.current_setting('block_size')::pg_catalog.int8",
    args: &[],
};

// One heap page: a TID range scan reads exactly that page, whatever the table's size (the
// caller disables sequential scans while it runs, so a plan made on an empty table stays right).
// A lease is over once its TTL and its lock-delay have run out.
static EXPIRED_ON_PAGE: Statement = Statement {
    sql: "SELECT key, owner FROM dlock_internal.lease \
          WHERE ctid OPERATOR(pg_catalog.>=) pg_catalog.format('(%s,0)', $1)::pg_catalog.tid \
            AND ctid OPERATOR(pg_catalog.<) pg_catalog.format('(%s,0)', $1 OPERATOR(pg_catalog.+) 1::pg_catalog.int8)::pg_catalog.tid \
            AND expires_at OPERATOR(pg_catalog.+) lock_delay OPERATOR(pg_catalog.<=) $2",
    args: &[INT8, TSTZ],
};

// Every election's leader with a TTL (a handful of rows at most: one per election).
static LEADERS: Statement = Statement {
    sql: "SELECT key, fence, expires_at FROM dlock_internal.lease \
          WHERE kind OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\" \
            AND expires_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz",
    args: &[],
};

// The partial index on session-bound rows makes this a short scan from `$1` on.
static SESSION_BOUND_KEYS: Statement = Statement {
    sql: "SELECT key, owner, fence FROM dlock_internal.lease \
          WHERE expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz \
            AND key OPERATOR(pg_catalog.>) $1 ORDER BY key LIMIT $2",
    args: &[TEXT, INT8],
};

static ALL: Statement = Statement {
    sql: concat!(
        "SELECT key, ",
        "owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, kind, \
         max_holders, (pg_catalog.extract('epoch'::pg_catalog.text, lock_delay) OPERATOR(pg_catalog.*) 1000000::pg_catalog.numeric)::pg_catalog.int8, info",
        " FROM dlock_internal.lease ORDER BY key, fence"
    ),
    args: &[],
};

// Release 0.1.0's table (`relation::Shape::Release010`): one row per key, exclusive leases
// only, no lock-delay; the same answers as above.
mod release_010 {
    use super::*;

    pub static READ: Statement = Statement {
        sql: "SELECT owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, 'x'::pg_catalog.\"char\", \
              NULL::pg_catalog.int4, 0::pg_catalog.int8, NULL::pg_catalog.text \
              FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1",
        args: &[TEXT],
    };

    // $7..$10 (kind, permits, lock-delay, info) are always exclusive's: 0.1.0 declares nothing else.
    pub static GRANT: Statement = Statement {
        sql: "INSERT INTO dlock_internal.lease AS l \
                (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid) \
              SELECT $1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, $4, $5, $6 \
               WHERE $7 OPERATOR(pg_catalog.=) 'x'::pg_catalog.\"char\" AND $8 IS NULL \
                 AND $9 OPERATOR(pg_catalog.=) 0::pg_catalog.int8 AND $10 IS NULL \
              ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, role = excluded.role, fence = excluded.fence, \
                hold_count = 1, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, \
                holder_pid = excluded.holder_pid \
              RETURNING l.fence",
        args: &[TEXT, TEXT, OID, TSTZ, TSTZ, INT4, CHAR, INT4, INT8, TEXT],
    };

    pub static TRY_GRANT: Statement = Statement {
        sql: "INSERT INTO dlock_internal.lease AS l \
                (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid) \
              SELECT $1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, $4, $5, $6 \
               WHERE $7 OPERATOR(pg_catalog.=) 'x'::pg_catalog.\"char\" AND $8 IS NULL \
                 AND $9 OPERATOR(pg_catalog.=) 0::pg_catalog.int8 AND $10 IS NULL \
                 AND NOT EXISTS (SELECT FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1) \
              RETURNING l.fence",
        args: &[TEXT, TEXT, OID, TSTZ, TSTZ, INT4, CHAR, INT4, INT8, TEXT],
    };

    pub static RELEASE_LAST_HOLD: Statement = Statement {
        sql: "DELETE FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2 \
                AND role OPERATOR(pg_catalog.=) $3 AND hold_count OPERATOR(pg_catalog.=) 1 \
                AND expires_at OPERATOR(pg_catalog.>) $4 \
                AND expires_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz \
                AND ($5 IS NULL OR $5 OPERATOR(pg_catalog.=) 'x'::pg_catalog.\"char\") \
              RETURNING 'x'::pg_catalog.\"char\"",
        args: &[TEXT, TEXT, OID, TSTZ, CHAR],
    };

    pub static EXPIRED_ON_PAGE: Statement = Statement {
        sql: "SELECT key, owner FROM dlock_internal.lease \
              WHERE ctid OPERATOR(pg_catalog.>=) pg_catalog.format('(%s,0)', $1)::pg_catalog.tid \
                AND ctid OPERATOR(pg_catalog.<) pg_catalog.format('(%s,0)', $1 OPERATOR(pg_catalog.+) 1::pg_catalog.int8)::pg_catalog.tid \
                AND expires_at OPERATOR(pg_catalog.<=) $2",
        args: &[INT8, TSTZ],
    };

    pub static ALL: Statement = Statement {
        sql: "SELECT key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, \
              'x'::pg_catalog.\"char\", NULL::pg_catalog.int4, 0::pg_catalog.int8, NULL::pg_catalog.text \
              FROM dlock_internal.lease ORDER BY key",
        args: &[],
    };
}

/// `current`, or its 0.1.0 twin on a table not yet updated from 0.1.0.
fn shaped(current: &'static Statement, release_010: &'static Statement) -> &'static Statement {
    match relation::relations().map(|r| r.shape) {
        Some(relation::Shape::Release010) => release_010,
        _ => current,
    }
}

static WAITERS: Statement = Statement {
    sql: "SELECT (classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32::pg_catalog.int4) \
                 OPERATOR(pg_catalog.|) objid::pg_catalog.int8, \
                 pg_catalog.count(*)::pg_catalog.int4 \
          FROM pg_catalog.pg_locks \
          WHERE locktype OPERATOR(pg_catalog.=) 'advisory'::pg_catalog.text \
            AND database OPERATOR(pg_catalog.=) $1 AND objsubid OPERATOR(pg_catalog.=) $2 \
            AND (pid IS NULL OR pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()) GROUP BY 1",
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
    let kind = required::<i8>(row, col(7), "kind") as u8;
    Lease {
        owner: required(row, col(0), "owner"),
        role: required::<Oid>(row, col(1), "role").to_u32(),
        fence: required(row, col(2), "fence"),
        hold_count: required(row, col(3), "hold_count"),
        acquired_at: required(row, col(4), "acquired_at"),
        expires_at: required(row, col(5), "expires_at"),
        holder_pid: required(row, col(6), "holder_pid"),
        kind: Kind::from_code(kind)
            .unwrap_or_else(|| pgrx::error!("dlock: internal error: unknown lease kind {:?}", kind as char)),
        max_holders: row.get(col(8)),
        lock_delay: required(row, col(9), "lock_delay"),
        info: row.get(col(10)),
    }
}

/// The rows of `key`, in fence order.
pub fn read(spi: &Spi, key: &str) -> Vec<Lease> {
    query(spi, shaped(&READ, &release_010::READ), &[arg(key)], |row| lease_from(row, 1))
}

fn write(spi: &Spi, stmt: &'static Statement, new: &NewLease) -> Option<i64> {
    let args = [
        arg(new.key),
        arg(new.owner),
        arg(Oid::from(new.role)),
        arg(new.acquired_at),
        arg(new.expires_at),
        arg(new.holder_pid),
        arg(new.kind.code() as i8),
        arg(new.max_holders),
        arg(new.lock_delay),
        arg(new.info),
    ];
    query(spi, stmt, &args, |row| required::<i64>(row, 1, "fence")).pop()
}

/// Writes a new lease (inserting, or replacing a dead lease of the same owner); its fence.
pub fn grant(spi: &Spi, new: &NewLease) -> i64 {
    write(spi, shaped(&GRANT, &release_010::GRANT), new).unwrap_or_else(|| {
        // Only 0.1.0's table refuses a row: it has no room for what 0.2.0 added.
        pgrx::error!("dlock: this database's dlock is 0.1.0, which has exclusive leases only; run ALTER EXTENSION dlock UPDATE")
    })
}

/// Writes a new lease if its key has no row at all; the fence, or `None` when it has one.
pub fn try_grant(spi: &Spi, new: &NewLease) -> Option<i64> {
    write(spi, shaped(&TRY_GRANT, &release_010::TRY_GRANT), new)
}

/// Deletes a live TTL lease with one hold left, if `owner` and `role` hold it; the kind of the
/// lease it deleted.
pub fn release_last_hold(
    spi: &Spi,
    key: &str,
    owner: &str,
    role: u32,
    now: Timestamp,
    only: Option<Kind>,
) -> Option<Kind> {
    let only = only.map(|kind| kind.code() as i8);
    query(
        spi,
        shaped(&RELEASE_LAST_HOLD, &release_010::RELEASE_LAST_HOLD),
        &[arg(key), arg(owner), arg(Oid::from(role)), arg(now), arg(only)],
        |row| Kind::from_code(required::<i8>(row, 1, "kind") as u8),
    )
    .pop()
    .flatten()
}

/// One more hold of `owner`'s lease of `key`.
pub fn reenter(spi: &Spi, key: &str, owner: &str, expires_at: Timestamp, pid: i32) {
    execute(spi, &REENTER, &[arg(key), arg(owner), arg(expires_at), arg(pid)]);
}

/// Sets the expiry of `owner`'s lease of `key`.
pub fn set_expiry(spi: &Spi, key: &str, owner: &str, expires_at: Timestamp) {
    execute(spi, &SET_EXPIRY, &[arg(key), arg(owner), arg(expires_at)]);
}

/// One hold fewer of `owner`'s lease of `key`.
pub fn decrement(spi: &Spi, key: &str, owner: &str) {
    execute(spi, &DECREMENT, &[arg(key), arg(owner)]);
}

/// Removes `owner`'s row of `key`.
pub fn delete(spi: &Spi, key: &str, owner: &str) {
    execute(spi, &DELETE, &[arg(key), arg(owner)]);
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

/// (key, owner) of the rows on heap page `page` whose TTL and lock-delay ran out by `now`, with
/// sequential scans disabled until the caller's GUC nest level closes, so the statement is
/// always planned as a TID range scan.
pub fn expired_on_page_without_seqscan(spi: &Spi, page: i64, now: Timestamp) -> Vec<(String, String)> {
    // SAFETY: the caller opened a GUC nest level (`guc::nested`).
    unsafe { crate::pg::guc::set_saved(c"enable_seqscan", "off") };
    query(spi, shaped(&EXPIRED_ON_PAGE, &release_010::EXPIRED_ON_PAGE), &[arg(page), arg(now)], |row| {
        (required::<String>(row, 1, "key"), required::<String>(row, 2, "owner"))
    })
}

/// Up to `limit` session-bound rows after key `after` in key order: (key, owner, fence).
pub fn session_bound_keys(spi: &Spi, after: &str, limit: i64) -> Vec<(String, String, i64)> {
    query(spi, &SESSION_BOUND_KEYS, &[arg(after), arg(limit)], |row| {
        (
            required::<String>(row, 1, "key"),
            required::<String>(row, 2, "owner"),
            required::<i64>(row, 3, "fence"),
        )
    })
}

/// (election, term, expires_at) of every leader with a TTL, live or expired.
pub fn leaders(spi: &Spi) -> Vec<(String, i64, Timestamp)> {
    if relation::relations().is_some_and(|r| r.shape == relation::Shape::Release010) {
        return Vec::new();
    }
    query(spi, &LEADERS, &[], |row| {
        (
            required::<String>(row, 1, "key"),
            required::<i64>(row, 2, "fence"),
            required::<Timestamp>(row, 3, "expires_at"),
        )
    })
}

/// Every row, in key order.
pub fn all(spi: &Spi) -> Vec<(String, Lease)> {
    query(spi, shaped(&ALL, &release_010::ALL), &[], |row| {
        (required::<String>(row, 1, "key"), lease_from(row, 2))
    })
}

/// Sessions in queues per key hash in this database, this one left out: holders and waiters of
/// queue locks (a prepared transaction's lock, which has no pid, counts).
pub fn waiters(spi: &Spi, database: Oid, space: u16) -> Vec<(u64, i32)> {
    spi.query(&WAITERS, &[arg(database), arg(space as i16)], |row| {
        (required::<i64>(row, 1, "waiters' key") as u64, required::<i32>(row, 2, "waiters"))
    })
}

/// An interval as microseconds, as PostgreSQL orders intervals.
pub fn micros(interval: Interval) -> Micros {
    interval.as_micros().clamp(i128::from(Micros::MIN), i128::from(Micros::MAX)) as Micros
}

/// Microseconds as an interval datum.
pub fn interval_datum(us: Micros) -> pg_sys::Datum {
    Interval::from_micros(us).into_datum().expect("interval datum")
}
