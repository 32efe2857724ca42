//! Session binding: the session a session-bound lease (`ttl NULL`) belongs to holds a
//! session-scoped lock on its fence; it vanishes when that session ends in any way, which is how
//! others see that it died. Fences are unique, so bindings never collide.

use crate::locks::deadline::{self, Poke};
use crate::locks::tags::{self, Space, tag};
use dlock_core::Timestamp;
use pgrx::pg_sys;

/// Binds the lease with this fence to our session.
pub fn bind(fence: i64) {
    if !tags::acquire(&tag(Space::Binding, fence as u64), pg_sys::ExclusiveLock, true, false) {
        crate::pg::report::raise(dlock_core::DlockError::StaleBinding { fence }, "dlock");
    }
}

/// Ends our session's binding of the lease with this fence (if it still has it).
pub fn unbind(fence: i64) {
    if binding_held(fence) {
        tags::release(&tag(Space::Binding, fence as u64), pg_sys::ExclusiveLock, true);
    }
}

/// Whether our session still holds the binding of this fence. `DISCARD ALL` and
/// `pg_advisory_unlock_all()` let every session-level advisory lock go, ours included: that
/// ends the session's session-bound leases as a disconnect would, and this is how the session
/// itself finds out.
pub fn binding_held(fence: i64) -> bool {
    tags::held_by_me(&tag(Space::Binding, fence as u64), pg_sys::ExclusiveLock)
}

/// Waits until the session bound to `fence` lets the binding go (releases the lease or ends),
/// no later than `deadline`; whether it did. While it waits, the lock manager knows whom it
/// waits for, so a cycle of sessions waiting for each other's session-bound leases is found by
/// PostgreSQL's deadlock detector (ERROR 40P01 after `deadlock_timeout`). A force release,
/// which leaves the binding in place, pokes the waiter out early (`false`).
pub fn await_unbind(fence: i64, until: Option<Timestamp>) -> bool {
    let binding = tag(Space::Binding, fence as u64);
    let got = deadline::acquire_until_poked(&binding, pg_sys::ShareLock, until, Poke::Ends);
    if got {
        tags::release(&binding, pg_sys::ShareLock, false);
    }
    got
}

/// Whether some *other* session still holds the binding of this fence. (Our own bindings never
/// conflict with us, so callers check those first, see `session::is_bound_here`.)
pub fn bound_elsewhere(fence: i64) -> bool {
    // Share mode: concurrent probes do not disturb each other, the holder's exclusive blocks them.
    tags::held_elsewhere(&tag(Space::Binding, fence as u64), pg_sys::ShareLock)
}
