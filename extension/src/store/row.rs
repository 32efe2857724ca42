//! The lease table's row, as dlock writes it: its columns, by name and type.

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

/// The columns of `dlock_internal.lease`, in the order the install script (and the upgrade
/// from 0.1.0, which appends the last four) creates them.
pub const COLUMNS: [(&str, Oid); 12] = [
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
];

/// Release 0.1.0's table has the first eight.
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
