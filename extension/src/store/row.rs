//! The lease table's row, as dlock writes it: its columns, by name and type.
//!
//! A key has at most one **key row** (`holder = ''`), which outlives its leases: a grant of a
//! key nobody waits for writes its exclusive lease (or its election's leader) there in place,
//! and a release marks it free (`hold_count = 0`), so the lock cycle of a key updates one row
//! (a HOT update: no indexed column changes) instead of inserting and deleting one. Shared
//! leases, and exclusive ones granted while others wait for the key, live in **owner rows**
//! (`holder = owner`), inserted and deleted: on a key that changes hands under waiters whose
//! snapshots hold back pruning, one row updated in place would grow a chain of dead versions
//! every read of the key walks, where owner rows let a read go straight to its owner's entries.

use dlock_core::lease::Kind;
use dlock_core::{Micros, Timestamp};
use pgrx::pg_sys::{self, Oid};

/// A lease about to be written by a grant.
pub struct NewLease<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub role: u32,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    pub holder_pid: i32,
    pub kind: Kind,
    pub max_holders: Option<i32>,
    pub lock_delay: Micros,
    pub info: Option<&'a str>,
}

/// Which row of its key a lease is written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The key row, updated in place.
    Key,
    /// A row of the owner's own.
    Owner,
}

impl Slot {
    /// The `holder` column of the row of this slot for `owner`.
    pub fn holder(self, owner: &str) -> &str {
        match self {
            Slot::Key => KEY_ROW,
            Slot::Owner => owner,
        }
    }

    /// Where a grant of `kind` writes when nobody else waits for the key (`waiters`: somebody
    /// does, or the grantee waited itself): the key row for an exclusive lease or a leader,
    /// owner rows for shared leases.
    pub fn for_grant(kind: Kind, waiters: bool) -> Slot {
        if kind.is_shared() || waiters { Slot::Owner } else { Slot::Key }
    }
}

/// The `holder` of a key row.
pub const KEY_ROW: &str = "";

/// A row of the table as the sweep sees it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub key: String,
    /// `KEY_ROW`, or the owner of an owner row (of release 0.2.0's and 0.1.0's tables too,
    /// which have owner rows only).
    pub holder: String,
    /// The lease's owner (none when free).
    pub owner: Option<String>,
    pub hold_count: i32,
    /// A lease's expiry; when free, when it was freed.
    pub expires_at: Timestamp,
    pub lock_delay: Micros,
    /// The session binding of a session-bound lease (its fence).
    pub fence: Option<i64>,
}

/// A row the sweep deleted: the lease it still held, if any (one that had run out, or whose
/// session had ended).
pub struct Deleted {
    pub lease: Option<dlock_core::lease::Lease>,
}

/// The columns of `dlock_internal.lease`, in the order the install script creates them (and
/// the updates from 0.1.0 and 0.2.0 leave them: each appended what it added).
pub const COLUMNS: [(&str, Oid); 13] = [
    ("key", pg_sys::TEXTOID),
    ("owner", pg_sys::TEXTOID),
    ("role", pg_sys::OIDOID),
    ("fence", pg_sys::INT8OID),
    ("hold_count", pg_sys::INT4OID),
    ("acquired_at", pg_sys::TIMESTAMPTZOID),
    ("expires_at", pg_sys::TIMESTAMPTZOID),
    ("holder_pid", pg_sys::INT4OID),
    ("kind", pg_sys::CHAROID),
    ("max_holders", pg_sys::INT4OID),
    ("lock_delay", pg_sys::INTERVALOID),
    ("info", pg_sys::TEXTOID),
    ("holder", pg_sys::TEXTOID),
];

/// Release 0.2.0's table has the first twelve, release 0.1.0's the first eight.
pub const RELEASE_020_COLUMNS: usize = 12;
pub const RELEASE_010_COLUMNS: usize = 8;

/// Indexes into [`COLUMNS`].
pub const KEY: usize = 0;
pub const OWNER: usize = 1;
pub const ROLE: usize = 2;
pub const FENCE: usize = 3;
pub const HOLD_COUNT: usize = 4;
pub const ACQUIRED_AT: usize = 5;
pub const EXPIRES_AT: usize = 6;
pub const HOLDER_PID: usize = 7;
pub const KIND: usize = 8;
pub const MAX_HOLDERS: usize = 9;
pub const LOCK_DELAY: usize = 10;
pub const INFO: usize = 11;
pub const HOLDER: usize = 12;
