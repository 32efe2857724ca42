//! Whether a lease is held right now: a TTL lease until its `expires_at` (on the server clock),
//! a session-bound lease while the session it is bound to lives.

use crate::locks::session;
use dlock_core::Timestamp;
use dlock_core::lease::{Current, Lease};

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
