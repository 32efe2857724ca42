//! The lease table's row, as dlock writes it: its columns, by name and type.

use dlock_core::Timestamp;
use pgrx::pg_sys::{self, Oid};

/// A lease about to be written by a grant.
pub struct NewLease<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub role: u32,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    pub holder_pid: i32,
}

/// The columns of `dlock_internal.lease`, in the order the install script creates them.
pub const COLUMNS: [(&str, Oid); 8] = [
    ("key", pg_sys::TEXTOID),
    ("owner", pg_sys::TEXTOID),
    ("role", pg_sys::OIDOID),
    ("fence", pg_sys::INT8OID),
    ("hold_count", pg_sys::INT4OID),
    ("acquired_at", pg_sys::TIMESTAMPTZOID),
    ("expires_at", pg_sys::TIMESTAMPTZOID),
    ("holder_pid", pg_sys::INT4OID),
];

/// Indexes into [`COLUMNS`].
pub const KEY: usize = 0;
pub const OWNER: usize = 1;
pub const ROLE: usize = 2;
pub const FENCE: usize = 3;
pub const HOLD_COUNT: usize = 4;
pub const ACQUIRED_AT: usize = 5;
pub const EXPIRES_AT: usize = 6;
pub const HOLDER_PID: usize = 7;
