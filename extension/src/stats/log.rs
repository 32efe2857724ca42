//! The LOG lines a DBA can act on: waits that took `dlock.log_min_wait` or longer, and leases
//! that expired while their holder's session was still connected (a paused or hung holder: the
//! case fencing exists for). Force releases are logged where they happen (`ops/release.rs`).

use super::{Counter, WaitOutcome, count_at_commit};
use crate::pg::role;
use dlock_core::Timestamp;
use dlock_core::lease::Lease;
use pgrx::pg_sys;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

static LOG_MIN_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(-1);
static TRACK: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Defines `dlock.log_min_wait` and `dlock.track_stats` (from `_PG_init`, with the other
/// settings).
pub fn define_settings() {
    GucRegistry::define_bool_guc(
        c"dlock.track_stats",
        c"Counts what dlock does in dlock_stats (preloaded only).",
        c"Like track_counts: off, nothing is counted (the benchmark measures what counting costs).",
        &TRACK,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"dlock.log_min_wait",
        c"Logs every dlock wait that took at least this long (-1: none).",
        c"Like log_lock_waits for dlock's waits: the key, owner, role, duration and outcome of \
          each wait that took this long or longer are logged when it ends.",
        &LOG_MIN_WAIT_MS,
        -1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
}

/// `dlock.track_stats`. (A second dlock library counts nothing anyway.)
pub fn tracking() -> bool {
    TRACK.get()
}

/// `dlock.log_min_wait`, if set. (A second dlock library reads the setting by name.)
pub fn min_wait_ms() -> Option<i64> {
    let ms = if crate::pg::loaded::is_second_library() {
        crate::pg::guc::show(c"dlock.log_min_wait")
            .and_then(|v| v.trim_end_matches("ms").parse().ok())
            .unwrap_or(-1)
    } else {
        LOG_MIN_WAIT_MS.get()
    };
    (ms >= 0).then_some(i64::from(ms))
}

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
    let Some(min) = min_wait_ms() else { return };
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
