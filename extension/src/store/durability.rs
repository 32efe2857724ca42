//! Which commits need to be durable. An acquire or renew must survive a crash once
//! acknowledged, so it commits as the session is configured (durably by default). A release
//! need not: if a crash loses it, the lease merely lives on until its TTL (a session-bound one
//! dies with the crash anyway), and whoever takes the key next commits durably *after* it in the
//! WAL. So a transaction whose only writes are dlock releases commits asynchronously, saving
//! one WAL flush per lock cycle.
//!
//! "Only writes" is checked, not assumed: a release is eligible only if the transaction had no
//! transaction id before it (nothing written), or everything written since the previous
//! eligible release was ours; and at commit, if this backend wrote any WAL after our last
//! release (`XactLastRecEnd` moved), the commit stays synchronous.

use pgrx::pg_sys;
use std::cell::Cell;

thread_local! {
    /// End of the WAL this transaction had written right after its last eligible release.
    static RELAXED_UNTIL: Cell<Option<pg_sys::XLogRecPtr>> = const { Cell::new(None) };
    /// `synchronous_commit` as it was before `at_pre_commit` relaxed this commit, until the
    /// transaction ends.
    static SAVED_LEVEL: Cell<Option<std::ffi::c_int>> = const { Cell::new(None) };
}

fn wal_end() -> pg_sys::XLogRecPtr {
    // SAFETY: a backend-local variable.
    unsafe { pg_sys::XactLastRecEnd }
}

/// Call before a release writes: whether its transaction has written only releases so far.
pub fn release_eligible() -> bool {
    // SAFETY: reads transaction state.
    let no_xid = unsafe { pg_sys::GetTopTransactionIdIfAny() } == pg_sys::InvalidTransactionId;
    no_xid || RELAXED_UNTIL.with(|r| r.get() == Some(wal_end()))
}

/// Call after a release wrote, with what `release_eligible` said before it.
pub fn released_if(eligible: bool) {
    RELAXED_UNTIL.with(|r| r.set(eligible.then(wal_end)));
}

/// About to commit: a transaction whose only writes were releases commits asynchronously.
///
/// The commit reads `synchronous_commit`'s variable (and so does its wait for synchronous
/// standbys, which `off` skips as well): it is set directly for this commit and put back at
/// the transaction's end (`at_end`), where a `SET LOCAL` would have made the end of every
/// such transaction walk all settings (`AtEOXact_GUC` on 15: 2 % of the CPU of pairs at 64
/// clients). Nothing runs in between that could read or set it.
pub fn at_pre_commit() {
    let only_releases = RELAXED_UNTIL.with(|r| r.take()) == Some(wal_end());
    if only_releases {
        // SAFETY: a backend-local variable; no other thread.
        unsafe {
            SAVED_LEVEL.with(|s| s.set(Some(pg_sys::synchronous_commit)));
            pg_sys::synchronous_commit = pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_OFF as std::ffi::c_int;
        }
    }
}

/// The transaction committed, rolled back or was prepared: the session's own
/// `synchronous_commit` is back, and nothing is relaxed.
pub fn at_end() {
    RELAXED_UNTIL.with(|r| r.set(None));
    if let Some(level) = SAVED_LEVEL.with(Cell::take) {
        // SAFETY: a backend-local variable; no other thread.
        unsafe { pg_sys::synchronous_commit = level };
    }
}
