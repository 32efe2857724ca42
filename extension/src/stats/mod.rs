//! What dlock did, counted per database since the server started or since
//! `dlock_stats_reset()`: grants, releases, expiries, waits and their durations, hand-offs,
//! notifications, fast mode's the same. The counts live in shared memory as atomics (preloaded
//! only: `counters.rs`); without preload nothing is counted and `dlock_stats` is empty.
//!
//! Lease events count when their transaction commits (a grant rolled back never happened), so
//! they are noted here first (`count_at_commit`); waits and fast mode's calls, which happen
//! whatever the transaction does, count at once (`count`).

mod counters;
mod log;
mod waits;

use crate::pg::pending::Pending;
use pgrx::pg_sys;
use std::cell::RefCell;

pub use counters::{request, startup};
pub use counters::{reset, snapshot};
pub use log::expired;
pub use waits::{WaitOutcome, note_handed, wait_ended, wait_started};

/// One counter of `dlock_stats` (its column, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    Grants,
    Reentries,
    Releases,
    ForceReleases,
    Expiries,
    ExpiriesWhileConnected,
    SessionEnds,
    WaitsStarted,
    WaitsGranted,
    WaitsTimedOut,
    WaitsCancelled,
    HandoffsDirect,
    HandoffsSelf,
    Notifications,
    FastGrants,
    FastReentries,
    FastReleases,
    FastExpiries,
    FastWaitsStarted,
    FastWaitsGranted,
    FastWaitsTimedOut,
    FastWaitsCancelled,
    FastHandoffs,
}

/// Every counter with its column name, in column order.
pub const COUNTERS: [(Counter, &str); 23] = [
    (Counter::Grants, "grants"),
    (Counter::Reentries, "reentries"),
    (Counter::Releases, "releases"),
    (Counter::ForceReleases, "force_releases"),
    (Counter::Expiries, "expiries"),
    (Counter::ExpiriesWhileConnected, "expiries_while_connected"),
    (Counter::SessionEnds, "session_ends"),
    (Counter::WaitsStarted, "waits_started"),
    (Counter::WaitsGranted, "waits_granted"),
    (Counter::WaitsTimedOut, "waits_timed_out"),
    (Counter::WaitsCancelled, "waits_cancelled"),
    (Counter::HandoffsDirect, "handoffs_direct"),
    (Counter::HandoffsSelf, "handoffs_self"),
    (Counter::Notifications, "notifications"),
    (Counter::FastGrants, "fast_grants"),
    (Counter::FastReentries, "fast_reentries"),
    (Counter::FastReleases, "fast_releases"),
    (Counter::FastExpiries, "fast_expiries"),
    (Counter::FastWaitsStarted, "fast_waits_started"),
    (Counter::FastWaitsGranted, "fast_waits_granted"),
    (Counter::FastWaitsTimedOut, "fast_waits_timed_out"),
    (Counter::FastWaitsCancelled, "fast_waits_cancelled"),
    (Counter::FastHandoffs, "fast_handoffs"),
];

/// Upper bounds of the wait-time histogram's buckets, in milliseconds (then +Inf).
pub const WAIT_BUCKETS_MS: [f64; 15] =
    [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0];

thread_local! {
    /// Lease events of the open transaction, by subtransaction.
    static PENDING: RefCell<Pending<Counter>> = const { RefCell::new(Pending::new()) };
}

/// Counts `counter` for this database now.
pub fn count(counter: Counter) {
    counters::add(counter, 1);
}

/// Counts `counter` for `database` now (fast mode's sweep clears entries of every database).
pub fn count_for(database: u32, counter: Counter) {
    counters::add_to(database, counter, 1);
}

/// Counts `counter` for this database when the open transaction commits.
pub fn count_at_commit(counter: Counter) {
    if counters::enabled() {
        PENDING.with(|p| p.borrow_mut().push(counter));
    }
}

/// The transaction ended: its lease events count if it committed.
pub fn at_end(commit: bool) {
    let events = PENDING.with(|p| p.borrow_mut().take());
    if commit {
        for counter in events {
            count(counter);
        }
    }
}

/// A subtransaction ended: a rolled-back one's events never happened.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if commit {
            p.sub_commit(sub, parent);
        } else {
            p.sub_abort(sub);
        }
    });
}
