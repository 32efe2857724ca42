//! The LOG lines a DBA can act on: waits that took `dlock.log_min_wait` or longer, and leases
//! that expired while their holder's session was still connected (a paused or hung holder: the
//! case fencing exists for). Force releases are logged where they happen (`ops/release.rs`).

use super::{Counter, WaitOutcome, count_at_commit};
use crate::pg::role;
use dlock_core::Timestamp;
use dlock_core::lease::Lease;
use pgrx::pg_sys;

/// Logs a wait of `waited` µs that ended with `outcome`, if it took `dlock.log_min_wait` or longer.
pub(super) fn long_wait(
    key: &str,
    owner: &str,
    role: u32,
    fast: bool,
    waited: i64,
    handed: bool,
    outcome: WaitOutcome,
) {
    let Some(min) = crate::settings::log_min_wait_ms() else { return };
    if waited < min * 1000 {
        return;
    }
    let how = match outcome {
        WaitOutcome::Granted if handed => "granted (handed over by the releaser)",
        WaitOutcome::Granted => "granted",
        WaitOutcome::TimedOut => "not granted: its wait ran out",
        WaitOutcome::Cancelled => "ended by an error",
    };
    pgrx::log!(
        "dlock: {} wait of {:.3} ms for key {key:?} by owner {owner:?} (role {}): {how}",
        if fast { "fast-mode" } else { "durable" },
        waited as f64 / 1000.0,
        role::name(role),
    );
}

/// A TTL lease found expired (taken over, or swept): counted at commit, and logged if its
/// holder's session is still connected. (A backend with the holder's pid is taken for the
/// holder's session: pids are reused only after the process ended, rarely within a ttl.)
pub fn expired(key: &str, lease: &Lease, now: Timestamp) {
    count_at_commit(Counter::Expiries);
    // SAFETY: a lookup in the proc array by pid.
    let connected = unsafe {
        let proc = pg_sys::BackendPidGetProc(lease.holder_pid);
        !proc.is_null() && (*proc).databaseId == pg_sys::MyDatabaseId
    };
    if !connected {
        return;
    }
    count_at_commit(Counter::ExpiriesWhileConnected);
    pgrx::log!(
        "dlock: the lease of key {key:?} (owner {:?}, role {}, fence {}) expired {:.3} s ago, after {:.3} s, while its holder's session (pid {}) was still connected",
        lease.owner,
        role::name(lease.role),
        lease.fence,
        (now - lease.expires_at) as f64 / 1e6,
        (lease.expires_at - lease.acquired_at) as f64 / 1e6,
        lease.holder_pid,
    );
}
