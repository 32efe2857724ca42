//! `dlock_wait_free`: waits until no lease holds a key (nor a lock-delay holds it back), without
//! taking it: the cache-rebuild pattern, where many sessions only need to know that the one
//! building is done. Waiters do not queue one behind another: one release wakes them all at
//! once and, preloaded, tells them the key is free (`wait/free_waiters.rs`); expiries they sleep
//! until.

use crate::locks::{dropping, liveness, session};
use crate::pg::backend::{my_pid, now};
use crate::pg::latch::{ensure_client_connected, sleep_until};
use crate::pg::spi;
use crate::pg::version::WaitEvent;
use crate::store;
use crate::wait::{answers, free_waiters};
use dlock_core::{DlockError, Micros, Timestamp, key::key_hash};

/// What a look at the key found.
enum Look {
    Free,
    /// Held: look again at this time (`None`: when woken).
    Held(Option<Timestamp>),
}

/// Waits until `key` is free, up to `wait` (`None`: without limit): whether it is.
pub fn wait_free(key: &str, wait: Option<Micros>) -> Result<bool, DlockError> {
    let hash = key_hash(key);
    let deadline = wait.map(|w| now().saturating_add(w));
    let _waiting = (wait != Some(0)).then(|| free_waiters::start(key, hash));
    loop {
        if dropping::under_way() {
            return Err(DlockError::Dropping);
        }
        ensure_client_connected();
        let look_again = match look(key)? {
            Look::Free => return Ok(true),
            Look::Held(at) => at,
        };
        // An answer already in the slot may be older than what the look saw.
        answers::forget();
        if deadline.is_some_and(|d| now() >= d) {
            return Ok(false);
        }
        sleep_until([deadline, look_again].into_iter().flatten().min(), WaitEvent::DlockLease.id());
        // Answered since the look: the key was free after it (a release found it so under its
        // key lock), no need to read it again.
        if answers::answered(hash) && !dropping::under_way() {
            return Ok(true);
        }
    }
}

/// Reads the key's leases as committed now.
fn look(key: &str) -> Result<Look, DlockError> {
    let now = now();
    let rows = spi::connect(|spi| store::read(spi, key));
    let state = liveness::state(&rows, now);
    if let Some(mine) = state.live.iter().find(|l| held_here(l)) {
        return Err(DlockError::HeldHere { owner: mine.owner.clone() });
    }
    if state.is_free() {
        return Ok(Look::Free);
    }
    // Free once every TTL lease ran out and the lock-delays after them; a session-bound lease
    // ends with a wake-up from its session.
    let bound = state.live.iter().any(|l| l.is_session_bound());
    let expiries = state.live.iter().map(|l| l.delay_ends()).max();
    Ok(Look::Held(if bound { None } else { expiries.max(state.delayed_until) }))
}

/// Whether this session holds `lease` itself: bound to it, or a TTL lease it took (its pid,
/// since this backend started: pids are reused).
fn held_here(lease: &dlock_core::lease::Lease) -> bool {
    if lease.is_session_bound() {
        return session::is_bound_here(lease.fence);
    }
    // SAFETY: set at backend start.
    let started = unsafe { pgrx::pg_sys::MyStartTimestamp };
    lease.holder_pid == my_pid() && lease.acquired_at >= started
}
