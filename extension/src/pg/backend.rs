//! Facts about this backend: the server clock, its pid, its database.

use dlock_core::Timestamp;
use pgrx::pg_sys;

/// The server clock (`clock_timestamp()`): every TTL is measured on it, never on a client's.
pub fn now() -> Timestamp {
    // SAFETY: no preconditions.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// This backend's pid.
pub fn my_pid() -> i32 {
    // SAFETY: set at backend start.
    unsafe { pg_sys::MyProcPid }
}

/// The database this backend is connected to.
pub fn database() -> pg_sys::Oid {
    // SAFETY: set for every backend that runs SQL.
    unsafe { pg_sys::MyDatabaseId }
}

/// Whether this call runs at the top level of an autocommit statement: its transaction ends
/// with the statement, outside any transaction block or subtransaction.
pub fn at_autocommit_top_level() -> bool {
    // SAFETY: reads transaction state.
    unsafe { !pg_sys::IsTransactionBlock() && pg_sys::GetCurrentTransactionNestLevel() == 1 }
}
