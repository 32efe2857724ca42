//! Waits: each counted when it starts and when it ends (granted, timed out, or ended by an
//! error: cancel, statement_timeout, a client that hung up), its duration in the histogram, and
//! a LOG line when it took `dlock.log_min_wait` or longer.

use super::{Counter, counters, log};
use crate::pg::backend::now;
use dlock_core::Timestamp;
use std::cell::RefCell;

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Granted (by the releaser in its own transaction if `note_handed` was called).
    Granted,
    /// Its `wait` ran out.
    TimedOut,
    /// An error ended it.
    Cancelled,
}

struct Wait {
    started: Timestamp,
    fast: bool,
    key: String,
    owner: String,
    role: u32,
    handed: bool,
}

thread_local! {
    static WAIT: RefCell<Option<Wait>> = const { RefCell::new(None) };
}

/// A wait under way, from [`wait_started`]: dropped before [`wait_ended`] counted it (an error
/// unwinding out of the wait, or returned by it), it ends as `Cancelled` then, not at the end of
/// the transaction, which a savepoint or a PL/pgSQL exception block may keep going. The
/// transaction's abort still ends a wait that a FATAL error ended: that exits without unwinding.
#[must_use = "the wait counts as cancelled when this is dropped"]
pub struct Counted;

impl Drop for Counted {
    fn drop(&mut self) {
        wait_ended(WaitOutcome::Cancelled);
    }
}

/// A wait for `key` starts (fast mode's, if `fast`); it ends by [`wait_ended`], or as
/// `Cancelled` when the guard is dropped first.
pub fn wait_started(fast: bool, key: &str, owner: &str, role: u32) -> Counted {
    if !counters::enabled() && crate::settings::log_min_wait_ms().is_none() {
        return Counted;
    }
    counters::add(if fast { Counter::FastWaitsStarted } else { Counter::WaitsStarted }, 1);
    let wait =
        Wait { started: now(), fast, key: key.to_string(), owner: owner.to_string(), role, handed: false };
    WAIT.with(|w| *w.borrow_mut() = Some(wait));
    Counted
}

/// The wait under way was granted by whoever freed the key, in their transaction.
pub fn note_handed() {
    WAIT.with(|w| {
        if let Some(wait) = w.borrow_mut().as_mut() {
            wait.handed = true;
        }
    });
}

/// The wait under way ended (nothing happens if none is).
pub fn wait_ended(outcome: WaitOutcome) {
    let Some(wait) = WAIT.with(|w| w.borrow_mut().take()) else { return };
    let waited = (now() - wait.started).max(0);
    let counter = match (outcome, wait.fast) {
        (WaitOutcome::Granted, false) => Counter::WaitsGranted,
        (WaitOutcome::TimedOut, false) => Counter::WaitsTimedOut,
        (WaitOutcome::Cancelled, false) => Counter::WaitsCancelled,
        (WaitOutcome::Granted, true) => Counter::FastWaitsGranted,
        (WaitOutcome::TimedOut, true) => Counter::FastWaitsTimedOut,
        (WaitOutcome::Cancelled, true) => Counter::FastWaitsCancelled,
    };
    counters::add(counter, 1);
    if outcome == WaitOutcome::Granted {
        let handoff = match (wait.fast, wait.handed) {
            (true, _) => Counter::FastHandoffs,
            (false, true) => Counter::HandoffsDirect,
            (false, false) => Counter::HandoffsSelf,
        };
        if !wait.fast || wait.handed {
            counters::add(handoff, 1);
        }
    }
    counters::add_wait(waited);
    log::long_wait(&wait.key, &wait.owner, wait.role, wait.fast, waited, wait.handed, outcome);
}
