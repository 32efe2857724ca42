//! Whether a lease is held right now: a TTL lease until its `expires_at` (on the server clock),
//! a session-bound lease while the session it is bound to lives; and so the state of a key.

use crate::locks::session;
use dlock_core::Timestamp;
use dlock_core::lease::{KeyState, Lease};

/// Whether someone holds `lease` at `now`.
pub fn is_live(lease: &Lease, now: Timestamp) -> bool {
    if lease.is_session_bound() { session::holder_alive(lease.fence) } else { lease.unexpired_at(now) }
}

/// The state of a key from its rows: live leases, and how long a lock-delay holds it back.
pub fn state(rows: &[Lease], now: Timestamp) -> KeyState<'_> {
    KeyState::of(rows, now, |lease| is_live(lease, now))
}
