//! The state of a key right now: free, held, or held by a lease that is dead (its TTL ran out,
//! or the session a session-bound lease belonged to has ended).

use crate::lease::{Current, Lease, Timestamp};
use crate::session;
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

/// Whether someone holds `lease` at `now`.
pub fn is_live(lease: &Lease, now: Timestamp) -> bool {
    if lease.is_session_bound() { session::holder_alive(lease.fence) } else { lease.unexpired_at(now) }
}

/// Classifies the row of a key.
pub fn classify(row: Option<&Lease>, now: Timestamp) -> Current<'_> {
    match row {
        None => Current::Free,
        Some(lease) if is_live(lease, now) => Current::Live(lease),
        Some(_) => Current::Dead,
    }
}
