//! Every SQL statement dlock runs against the lease table, `dlock_internal.lease`, run as the
//! table's owner (dlock's functions run as their caller, who may not touch it). Callers hold the
//! key lock of any key they change, so no two transactions ever write a key's rows at once.
//!
//! A set of statements per table shape (`relation::Shape`): this release's (key rows and owner
//! rows, `row.rs`), and release 0.2.0's and 0.1.0's (a row per holder, keyed by owner), which
//! this library serves until `ALTER EXTENSION dlock UPDATE` brings the table to this release.
//! On those the owner's row is the only slot: a grant there replaces the owner's row, a release
//! deletes it.

use crate::pg::role;
use crate::pg::spi::{self, Spi, Statement, arg};
use crate::store::relation::{self, Shape};
use crate::store::row::{NewLease, Slot, Stored};
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

/// The statements of one table shape.
struct Statements {
    /// (lease columns) of the leases of key $1 (held rows), in fence order.
    read: Statement,
    /// (lease columns) of owner $2's lease of key $1, if any.
    read_own: Statement,
    /// (fence) of a grant of $1..$10 into the row of holder $11 (inserted, or written over).
    grant: Statement,
    /// The same, only if no row of the key holds a lease.
    try_grant: Statement,
    /// (kind) of the last hold of a live TTL lease of owner $2 and role $3 freed, by $4, of
    /// kind $5 if not NULL: the key row's, marked free (tables of earlier releases have none).
    release_key_row: Option<Statement>,
    /// The same for the owner's row, deleted.
    release_owner_row: Statement,
    reenter: Statement,
    set_expiry: Statement,
    decrement: Statement,
    /// Frees the row of owner $2's lease of key $1 with fence $4: the key row marked free by $3.
    free_key_row: Option<Statement>,
    /// ... an owner row deleted.
    free_owner_row: Statement,
    keys_of_owner: Statement,
    /// (key, holder, hold_count, expires_at, lock_delay µs, fence) of the rows of heap page $1.
    rows_on_page: Statement,
    /// The same for the row of key $1 and holder $2.
    row_of: Statement,
    /// Deletes the row of key $1 and holder $2.
    delete_row: Statement,
    /// Every election leader with a TTL (0.1.0's table has no elections).
    leaders: Option<Statement>,
    all: Statement,
}

/// The columns `lease_from` reads, after any columns before them.
macro_rules! lease_columns {
    () => {
        "owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, kind, max_holders, \
         (pg_catalog.extract('epoch'::pg_catalog.text, lock_delay) OPERATOR(pg_catalog.*) \
         1000000::pg_catalog.numeric)::pg_catalog.int8, info"
    };
}

/// The values of a grant: $1 key, $2 owner, $3 role, $4 acquired_at, $5 expires_at,
/// $6 holder_pid, $7 kind, $8 max_holders, $9 lock_delay µs, $10 info. The fence comes from a
/// WAL-logged sequence, drawn in the transaction that writes the grant (so its commit's flush
/// covers the sequence's record): it only ever grows, across crashes, restarts and failover.
macro_rules! grant_values {
    () => {
        "$2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, $4, $5, $6, \
         $7, $8, $9::pg_catalog.float8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval, $10"
    };
}

/// The grant's upsert on this release's table: the row of ($1, holder $11), written over.
macro_rules! grant_upsert {
    () => {
        " ON CONFLICT (key, holder) DO UPDATE SET owner = excluded.owner, role = excluded.role, \
           fence = excluded.fence, hold_count = 1, acquired_at = excluded.acquired_at, \
           expires_at = excluded.expires_at, holder_pid = excluded.holder_pid, kind = excluded.kind, \
           max_holders = excluded.max_holders, lock_delay = excluded.lock_delay, info = excluded.info \
         RETURNING l.fence"
    };
}

/// A row that holds a lease.
macro_rules! held {
    () => {
        "hold_count OPERATOR(pg_catalog.>) 0"
    };
}

/// Owner $2's row of key $1: its owner row, or the key row if it holds the lease (two index
/// probes, never a walk over every entry of a busy key).
macro_rules! owners_row {
    () => {
        "key OPERATOR(pg_catalog.=) $1 \
         AND holder OPERATOR(pg_catalog.=) ANY (ARRAY[$2, '']::pg_catalog.text[]) \
         AND owner OPERATOR(pg_catalog.=) $2 AND hold_count OPERATOR(pg_catalog.>) 0"
    };
}

/// A free key row: nobody's, no hold; `expires_at` says since when.
macro_rules! freed {
    ($since:literal) => {
        concat!(
            "owner = NULL, role = NULL, hold_count = 0, expires_at = ",
            $since,
            ", holder_pid = NULL, max_holders = NULL, lock_delay = '0'::pg_catalog.interval, info = NULL"
        )
    };
}

/// The live TTL lease with one hold left of owner $2 and role $3 at $4, of kind $5 if given.
macro_rules! last_hold {
    () => {
        "owner OPERATOR(pg_catalog.=) $2 AND role OPERATOR(pg_catalog.=) $3 \
         AND hold_count OPERATOR(pg_catalog.=) 1 AND expires_at OPERATOR(pg_catalog.>) $4 \
         AND expires_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz \
         AND ($5 IS NULL OR kind OPERATOR(pg_catalog.=) $5)"
    };
}

const GRANT_ARGS: &[Oid] = &[TEXT, TEXT, OID, TSTZ, TSTZ, INT4, CHAR, INT4, INT8, TEXT, TEXT];
const LAST_HOLD_ARGS: &[Oid] = &[TEXT, TEXT, OID, TSTZ, CHAR];

/// This release's table: key rows and owner rows.
static CURRENT: Statements = Statements {
    read: Statement {
        sql: concat!(
            "SELECT ",
            lease_columns!(),
            " FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 AND ",
            held!(),
            " ORDER BY fence"
        ),
        args: &[TEXT],
    },
    read_own: Statement {
        sql: concat!("SELECT ", lease_columns!(), " FROM dlock_internal.lease WHERE ", owners_row!()),
        args: &[TEXT, TEXT],
    },
    grant: Statement {
        sql: concat!(
            "INSERT INTO dlock_internal.lease AS l (key, owner, role, fence, hold_count, acquired_at, \
               expires_at, holder_pid, kind, max_holders, lock_delay, info, holder) \
             VALUES ($1, ",
            grant_values!(),
            ", $11)",
            grant_upsert!()
        ),
        args: GRANT_ARGS,
    },
    try_grant: Statement {
        sql: concat!(
            "INSERT INTO dlock_internal.lease AS l (key, owner, role, fence, hold_count, acquired_at, \
               expires_at, holder_pid, kind, max_holders, lock_delay, info, holder) \
             SELECT $1, ",
            grant_values!(),
            ", $11 WHERE NOT EXISTS (SELECT FROM dlock_internal.lease \
               WHERE key OPERATOR(pg_catalog.=) $1 AND ",
            held!(),
            ")",
            grant_upsert!()
        ),
        args: GRANT_ARGS,
    },
    release_key_row: Some(Statement {
        sql: concat!(
            "UPDATE dlock_internal.lease SET ",
            freed!("$4"),
            " WHERE key OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) ''::pg_catalog.text AND ",
            last_hold!(),
            " RETURNING kind"
        ),
        args: LAST_HOLD_ARGS,
    }),
    release_owner_row: Statement {
        sql: concat!(
            "DELETE FROM dlock_internal.lease \
             WHERE key OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) $2 AND ",
            last_hold!(),
            " RETURNING kind"
        ),
        args: LAST_HOLD_ARGS,
    },
    reenter: Statement {
        sql: concat!(
            "UPDATE dlock_internal.lease \
             SET hold_count = hold_count OPERATOR(pg_catalog.+) 1, expires_at = $3, holder_pid = $4 WHERE ",
            owners_row!()
        ),
        args: &[TEXT, TEXT, TSTZ, INT4],
    },
    set_expiry: Statement {
        sql: concat!("UPDATE dlock_internal.lease SET expires_at = $3 WHERE ", owners_row!()),
        args: &[TEXT, TEXT, TSTZ],
    },
    decrement: Statement {
        sql: concat!(
            "UPDATE dlock_internal.lease SET hold_count = hold_count OPERATOR(pg_catalog.-) 1 WHERE ",
            owners_row!()
        ),
        args: &[TEXT, TEXT],
    },
    free_key_row: Some(Statement {
        sql: concat!(
            "UPDATE dlock_internal.lease SET ",
            freed!("$3"),
            " WHERE key OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) ''::pg_catalog.text \
               AND owner OPERATOR(pg_catalog.=) $2 AND fence OPERATOR(pg_catalog.=) $4"
        ),
        args: &[TEXT, TEXT, TSTZ, INT8],
    }),
    free_owner_row: Statement {
        sql: "DELETE FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) $2 \
                AND fence OPERATOR(pg_catalog.=) $3",
        args: &[TEXT, TEXT, INT8],
    },
    keys_of_owner: Statement {
        sql: concat!(
            "SELECT key FROM dlock_internal.lease WHERE owner OPERATOR(pg_catalog.=) $1 AND ",
            held!(),
            " AND ($2 IS NULL OR role OPERATOR(pg_catalog.=) $2) ORDER BY key"
        ),
        args: &[TEXT, OID],
    },
    // One heap page: a TID range scan reads exactly that page, whatever the table's size (the
    // caller disables sequential scans while it runs, so a plan made on an empty table stays
    // right).
    rows_on_page: Statement {
        sql: "SELECT key, holder, hold_count, expires_at, \
                (pg_catalog.extract('epoch'::pg_catalog.text, lock_delay) OPERATOR(pg_catalog.*) \
                  1000000::pg_catalog.numeric)::pg_catalog.int8, fence, owner \
              FROM dlock_internal.lease \
              WHERE ctid OPERATOR(pg_catalog.>=) pg_catalog.format('(%s,0)', $1)::pg_catalog.tid \
                AND ctid OPERATOR(pg_catalog.<) \
                    pg_catalog.format('(%s,0)', $1 OPERATOR(pg_catalog.+) 1::pg_catalog.int8)::pg_catalog.tid",
        args: &[INT8],
    },
    row_of: Statement {
        sql: "SELECT key, holder, hold_count, expires_at, \
                (pg_catalog.extract('epoch'::pg_catalog.text, lock_delay) OPERATOR(pg_catalog.*) \
                  1000000::pg_catalog.numeric)::pg_catalog.int8, fence, owner \
              FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) $2",
        args: &[TEXT, TEXT],
    },
    delete_row: Statement {
        sql: "DELETE FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) $2",
        args: &[TEXT, TEXT],
    },
    // Every election's leader with a TTL (a handful of rows at most: one per election).
    leaders: Some(Statement {
        sql: concat!(
            "SELECT key, fence, expires_at FROM dlock_internal.lease \
             WHERE kind OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\" AND ",
            held!(),
            " AND expires_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz"
        ),
        args: &[],
    }),
    all: Statement {
        sql: concat!(
            "SELECT key, ",
            lease_columns!(),
            " FROM dlock_internal.lease WHERE ",
            held!(),
            " ORDER BY key, fence"
        ),
        args: &[],
    },
};

/// Release 0.2.0's table: a row per holder, keyed by (key, owner). The holder of a row is its
/// owner.
// What releases 0.2.0 and 0.1.0 share: a row per holder, keyed by (key, owner).
const OWNER_KEYED_REENTER: Statement = Statement {
    sql: "UPDATE dlock_internal.lease \
          SET hold_count = hold_count OPERATOR(pg_catalog.+) 1, expires_at = $3, holder_pid = $4 \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
    args: &[TEXT, TEXT, TSTZ, INT4],
};
const OWNER_KEYED_SET_EXPIRY: Statement = Statement {
    sql: "UPDATE dlock_internal.lease SET expires_at = $3 \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
    args: &[TEXT, TEXT, TSTZ],
};
const OWNER_KEYED_DECREMENT: Statement = Statement {
    sql: "UPDATE dlock_internal.lease SET hold_count = hold_count OPERATOR(pg_catalog.-) 1 \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
    args: &[TEXT, TEXT],
};
const OWNER_KEYED_FREE: Statement = Statement {
    sql: "DELETE FROM dlock_internal.lease \
          WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2 \
            AND fence OPERATOR(pg_catalog.=) $3",
    args: &[TEXT, TEXT, INT8],
};
const OWNER_KEYED_KEYS_OF_OWNER: Statement = Statement {
    sql: "SELECT key FROM dlock_internal.lease \
          WHERE owner OPERATOR(pg_catalog.=) $1 AND ($2 IS NULL OR role OPERATOR(pg_catalog.=) $2) \
          ORDER BY key",
    args: &[TEXT, OID],
};

static RELEASE_020: Statements = Statements {
    read: Statement {
        sql: concat!(
            "SELECT ",
            lease_columns!(),
            " FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 ORDER BY fence"
        ),
        args: &[TEXT],
    },
    read_own: Statement {
        sql: concat!(
            "SELECT ",
            lease_columns!(),
            " FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2"
        ),
        args: &[TEXT, TEXT],
    },
    grant: Statement {
        sql: concat!(
            "INSERT INTO dlock_internal.lease AS l (key, owner, role, fence, hold_count, acquired_at, \
               expires_at, holder_pid, kind, max_holders, lock_delay, info) \
             SELECT $1, ",
            grant_values!(),
            " \
             ON CONFLICT (key, owner) DO UPDATE SET role = excluded.role, fence = excluded.fence, \
               hold_count = 1, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, \
               holder_pid = excluded.holder_pid, kind = excluded.kind, max_holders = excluded.max_holders, \
               lock_delay = excluded.lock_delay, info = excluded.info \
             RETURNING l.fence"
        ),
        args: GRANT_ARGS,
    },
    try_grant: Statement {
        sql: concat!(
            "INSERT INTO dlock_internal.lease AS l (key, owner, role, fence, hold_count, acquired_at, \
               expires_at, holder_pid, kind, max_holders, lock_delay, info) \
             SELECT $1, ",
            grant_values!(),
            " WHERE NOT EXISTS (SELECT FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1) \
             RETURNING l.fence"
        ),
        args: GRANT_ARGS,
    },
    release_key_row: None,
    release_owner_row: Statement {
        sql: concat!(
            "DELETE FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 AND ",
            last_hold!(),
            " RETURNING kind"
        ),
        args: LAST_HOLD_ARGS,
    },
    reenter: OWNER_KEYED_REENTER,
    set_expiry: OWNER_KEYED_SET_EXPIRY,
    decrement: OWNER_KEYED_DECREMENT,
    free_key_row: None,
    free_owner_row: OWNER_KEYED_FREE,
    keys_of_owner: OWNER_KEYED_KEYS_OF_OWNER,
    rows_on_page: Statement {
        sql: "SELECT key, owner, hold_count, expires_at, \
                (pg_catalog.extract('epoch'::pg_catalog.text, lock_delay) OPERATOR(pg_catalog.*) \
                  1000000::pg_catalog.numeric)::pg_catalog.int8, fence, owner \
              FROM dlock_internal.lease \
              WHERE ctid OPERATOR(pg_catalog.>=) pg_catalog.format('(%s,0)', $1)::pg_catalog.tid \
                AND ctid OPERATOR(pg_catalog.<) \
                    pg_catalog.format('(%s,0)', $1 OPERATOR(pg_catalog.+) 1::pg_catalog.int8)::pg_catalog.tid",
        args: &[INT8],
    },
    row_of: Statement {
        sql: "SELECT key, owner, hold_count, expires_at, \
                (pg_catalog.extract('epoch'::pg_catalog.text, lock_delay) OPERATOR(pg_catalog.*) \
                  1000000::pg_catalog.numeric)::pg_catalog.int8, fence, owner \
              FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
        args: &[TEXT, TEXT],
    },
    delete_row: Statement {
        sql: "DELETE FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
        args: &[TEXT, TEXT],
    },
    leaders: Some(Statement {
        sql: "SELECT key, fence, expires_at FROM dlock_internal.lease \
              WHERE kind OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\" \
                AND expires_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz",
        args: &[],
    }),
    all: Statement {
        sql: concat!("SELECT key, ", lease_columns!(), " FROM dlock_internal.lease ORDER BY key, fence"),
        args: &[],
    },
};

/// The columns of release 0.1.0's table `lease_from` reads (exclusive leases only).
macro_rules! release_010_columns {
    () => {
        "owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, 'x'::pg_catalog.\"char\", \
         NULL::pg_catalog.int4, 0::pg_catalog.int8, NULL::pg_catalog.text"
    };
}

/// What 0.1.0's table can hold: an exclusive lease, no permits, no lock-delay, no info.
macro_rules! release_010_request {
    () => {
        "$7 OPERATOR(pg_catalog.=) 'x'::pg_catalog.\"char\" AND $8 IS NULL \
         AND $9 OPERATOR(pg_catalog.=) 0::pg_catalog.int8 AND $10 IS NULL"
    };
}

/// Release 0.1.0's table: one row per key, exclusive leases only, no lock-delay.
static RELEASE_010: Statements = Statements {
    read: Statement {
        sql: concat!(
            "SELECT ",
            release_010_columns!(),
            " FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1"
        ),
        args: &[TEXT],
    },
    read_own: Statement {
        sql: concat!(
            "SELECT ",
            release_010_columns!(),
            " FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2"
        ),
        args: &[TEXT, TEXT],
    },
    grant: Statement {
        sql: concat!(
            "INSERT INTO dlock_internal.lease AS l \
               (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid) \
             SELECT $1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, \
               $4, $5, $6 WHERE ",
            release_010_request!(),
            " ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, role = excluded.role, \
               fence = excluded.fence, hold_count = 1, acquired_at = excluded.acquired_at, \
               expires_at = excluded.expires_at, holder_pid = excluded.holder_pid \
             RETURNING l.fence"
        ),
        args: GRANT_ARGS,
    },
    try_grant: Statement {
        sql: concat!(
            "INSERT INTO dlock_internal.lease AS l \
               (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid) \
             SELECT $1, $2, $3, pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), 1, \
               $4, $5, $6 WHERE ",
            release_010_request!(),
            " AND NOT EXISTS (SELECT FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1) \
             RETURNING l.fence"
        ),
        args: GRANT_ARGS,
    },
    release_key_row: None,
    release_owner_row: Statement {
        sql: "DELETE FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2 \
                AND role OPERATOR(pg_catalog.=) $3 AND hold_count OPERATOR(pg_catalog.=) 1 \
                AND expires_at OPERATOR(pg_catalog.>) $4 \
                AND expires_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz \
                AND ($5 IS NULL OR $5 OPERATOR(pg_catalog.=) 'x'::pg_catalog.\"char\") \
              RETURNING 'x'::pg_catalog.\"char\"",
        args: LAST_HOLD_ARGS,
    },
    reenter: OWNER_KEYED_REENTER,
    set_expiry: OWNER_KEYED_SET_EXPIRY,
    decrement: OWNER_KEYED_DECREMENT,
    free_key_row: None,
    free_owner_row: OWNER_KEYED_FREE,
    keys_of_owner: OWNER_KEYED_KEYS_OF_OWNER,
    rows_on_page: Statement {
        sql: "SELECT key, owner, hold_count, expires_at, 0::pg_catalog.int8, fence, owner \
              FROM dlock_internal.lease \
              WHERE ctid OPERATOR(pg_catalog.>=) pg_catalog.format('(%s,0)', $1)::pg_catalog.tid \
                AND ctid OPERATOR(pg_catalog.<) \
                    pg_catalog.format('(%s,0)', $1 OPERATOR(pg_catalog.+) 1::pg_catalog.int8)::pg_catalog.tid",
        args: &[INT8],
    },
    row_of: Statement {
        sql: "SELECT key, owner, hold_count, expires_at, 0::pg_catalog.int8, fence, owner \
              FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
        args: &[TEXT, TEXT],
    },
    delete_row: Statement {
        sql: "DELETE FROM dlock_internal.lease \
              WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2",
        args: &[TEXT, TEXT],
    },
    leaders: None,
    all: Statement {
        sql: concat!("SELECT key, ", release_010_columns!(), " FROM dlock_internal.lease ORDER BY key"),
        args: &[],
    },
};

static PAGE_COUNT: Statement = Statement {
    sql: "SELECT pg_catalog.pg_relation_size('dlock_internal.lease'::pg_catalog.regclass) \
          OPERATOR(pg_catalog./) pg_catalog.current_setting('block_size')::pg_catalog.int8",
    args: &[],
};

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

/// The lease table's shape and owner, or the operator error that it is missing.
fn relations() -> relation::Relations {
    relation::relations().unwrap_or_else(|| {
        crate::pg::report::raise(dlock_core::DlockError::NotInstalled, "dlock");
    })
}

/// The statements of the table's shape.
fn statements() -> &'static Statements {
    match relations().shape {
        Shape::Exact | Shape::Other => &CURRENT,
        Shape::Release020 => &RELEASE_020,
        Shape::Release010 => &RELEASE_010,
    }
}

fn query<T>(
    spi: &Spi,
    stmt: &'static Statement,
    args: &[Option<pg_sys::Datum>],
    f: impl FnMut(&spi::Row) -> T,
) -> Vec<T> {
    role::as_owner(relations().owner, || spi.query(stmt, args, f))
}

fn execute(spi: &Spi, stmt: &'static Statement, args: &[Option<pg_sys::Datum>]) -> u64 {
    role::as_owner(relations().owner, || spi.execute(stmt, args))
}

/// Column `n` of a row that must not be NULL: a NULL or a value of another type means the table
/// is not what dlock made, which is an error, never a lease with fence 0.
fn required<T: FromDatum>(row: &spi::Row, n: i32, column: &str) -> T {
    row.get(n).unwrap_or_else(|| {
        super::corrupted(format!("dlock_internal.lease.{column} is NULL or not of its type"))
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
            .unwrap_or_else(|| super::corrupted(format!("unknown lease kind {:?}", kind as char))),
        max_holders: row.get(col(8)),
        lock_delay: required(row, col(9), "lock_delay"),
        info: row.get(col(10)),
    }
}

/// The leases of `key`, in fence order.
pub fn read(spi: &Spi, key: &str) -> Vec<Lease> {
    query(spi, &statements().read, &[arg(key)], |row| lease_from(row, 1))
}

/// `owner`'s lease of `key`, if any (as a vector of at most one).
pub fn read_own(spi: &Spi, key: &str, owner: &str) -> Vec<Lease> {
    query(spi, &statements().read_own, &[arg(key), arg(owner)], |row| lease_from(row, 1))
}

fn write(spi: &Spi, stmt: &'static Statement, new: &NewLease, slot: Slot) -> Option<i64> {
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
        arg(slot.holder(new.owner)),
    ];
    let fence = query(spi, stmt, &args, |row| required::<i64>(row, 1, "fence")).pop();
    // Inserted or written over: this path does not tell, so it counts as added (a page swept
    // for nothing now and then, on a table that is not as dlock made it anyway).
    if fence.is_some() {
        super::sweep::row_added();
    }
    fence
}

/// Writes a lease into its `slot` (inserting the row, or writing over it); its fence.
pub fn grant(spi: &Spi, new: &NewLease, slot: Slot) -> i64 {
    write(spi, &statements().grant, new, slot).unwrap_or_else(|| {
        // Only 0.1.0's table refuses a row: it has no room for what 0.2.0 added.
        crate::pg::report::raise(dlock_core::DlockError::NeedsUpdate { release: "0.1.0" }, "dlock")
    })
}

/// Writes a lease into its `slot` if no row of its key holds a lease; the fence, or `None`.
pub fn try_grant(spi: &Spi, new: &NewLease, slot: Slot) -> Option<i64> {
    write(spi, &statements().try_grant, new, slot)
}

/// Frees the last hold of a live TTL lease of `owner` and `role` (of kind `only`, if given):
/// its kind, if there was one to free.
pub fn release_last_hold(
    spi: &Spi,
    key: &str,
    owner: &str,
    role: u32,
    now: Timestamp,
    only: Option<Kind>,
) -> Option<Kind> {
    let only = only.map(|kind| kind.code() as i8);
    let args = [arg(key), arg(owner), arg(Oid::from(role)), arg(now), arg(only)];
    let kind_of = |row: &spi::Row| Kind::from_code(required::<i8>(row, 1, "kind") as u8);
    let statements = statements();
    let in_key_row =
        statements.release_key_row.as_ref().and_then(|stmt| query(spi, stmt, &args, kind_of).pop());
    in_key_row.or_else(|| query(spi, &statements.release_owner_row, &args, kind_of).pop()).flatten()
}

/// One more hold of `owner`'s lease of `key`.
pub fn reenter(spi: &Spi, key: &str, owner: &str, expires_at: Timestamp, pid: i32) {
    execute(spi, &statements().reenter, &[arg(key), arg(owner), arg(expires_at), arg(pid)]);
}

/// Sets the expiry of `owner`'s lease of `key`.
pub fn set_expiry(spi: &Spi, key: &str, owner: &str, expires_at: Timestamp) {
    execute(spi, &statements().set_expiry, &[arg(key), arg(owner), arg(expires_at)]);
}

/// One hold fewer of `owner`'s lease of `key`.
pub fn decrement(spi: &Spi, key: &str, owner: &str) {
    execute(spi, &statements().decrement, &[arg(key), arg(owner)]);
}

/// Frees `owner`'s lease of `key` with `fence`, whatever its holds: the key row marked free (at
/// `now`), or the owner's row deleted.
pub fn free(spi: &Spi, key: &str, owner: &str, fence: i64, now: Timestamp) {
    let statements = statements();
    let in_key_row = statements
        .free_key_row
        .as_ref()
        .is_some_and(|stmt| execute(spi, stmt, &[arg(key), arg(owner), arg(now), arg(fence)]) > 0);
    if !in_key_row {
        execute(spi, &statements.free_owner_row, &[arg(key), arg(owner), arg(fence)]);
    }
}

/// Keys with a lease of `owner`, of `role` only unless `None` (admins), in key order.
pub fn keys_of_owner(spi: &Spi, owner: &str, role: Option<u32>) -> Vec<String> {
    let role = role.map(Oid::from);
    query(spi, &statements().keys_of_owner, &[arg(owner), arg(role)], |row| required::<String>(row, 1, "key"))
}

/// Pages of the lease table.
pub fn page_count(spi: &Spi) -> i64 {
    query(spi, &PAGE_COUNT, &[], |row| row.get::<i64>(1)).pop().flatten().unwrap_or(0)
}

fn stored_from(row: &spi::Row) -> Stored {
    Stored {
        key: required(row, 1, "key"),
        holder: required(row, 2, "holder"),
        hold_count: required(row, 3, "hold_count"),
        expires_at: required(row, 4, "expires_at"),
        lock_delay: required(row, 5, "lock_delay"),
        fence: row.get(6),
        owner: row.get(7),
    }
}

/// The rows on heap page `page`, with sequential scans disabled until the caller's GUC nest
/// level closes, so the statement is always planned as a TID range scan.
pub fn rows_on_page_without_seqscan(spi: &Spi, page: i64) -> Vec<Stored> {
    // SAFETY: the caller opened a GUC nest level (`guc::nested`).
    unsafe { crate::pg::guc::set_saved(c"enable_seqscan", "off") };
    query(spi, &statements().rows_on_page, &[arg(page)], stored_from)
}

/// The row of `key` and `holder` (`row::KEY_ROW`, or an owner), if any.
pub fn row_of(spi: &Spi, key: &str, holder: &str) -> Option<Stored> {
    query(spi, &statements().row_of, &[arg(key), arg(holder)], stored_from).pop()
}

/// Deletes the row of `key` and `holder`.
pub fn delete_row(spi: &Spi, key: &str, holder: &str) {
    execute(spi, &statements().delete_row, &[arg(key), arg(holder)]);
}

/// (election, term, expires_at) of every leader with a TTL, live or expired.
pub fn leaders(spi: &Spi) -> Vec<(String, i64, Timestamp)> {
    let Some(stmt) = &statements().leaders else { return Vec::new() };
    query(spi, stmt, &[], |row| {
        (
            required::<String>(row, 1, "key"),
            required::<i64>(row, 2, "fence"),
            required::<Timestamp>(row, 3, "expires_at"),
        )
    })
}

/// Every lease, in key order.
pub fn all(spi: &Spi) -> Vec<(String, Lease)> {
    query(spi, &statements().all, &[], |row| (required::<String>(row, 1, "key"), lease_from(row, 2)))
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
    interval(us).into_datum().expect("interval datum")
}

/// Microseconds as an interval of no days or months, built in place (pgrx's `from_micros` goes
/// through seconds as a float and `make_interval`, a function call).
pub fn interval(us: Micros) -> Interval {
    Interval::new(0, 0, us).expect("with no months, no sign can disagree")
}
