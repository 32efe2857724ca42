//! Waiting for what keeps a key from a head of its queue (one key's or every key's of a set):
//! one sleep on the blocker, after which the head tries again.

use crate::locks::{binding, session};
use crate::pg::latch::sleep_until;
use crate::pg::version::WaitEvent;
use dlock_core::lease::Blocker;
use dlock_core::{DlockError, Timestamp};
use pgrx::pg_sys;

/// How much longer than `deadlock_timeout` a head waits on a session-bound holder in one go:
/// enough for PostgreSQL's deadlock check (run at `deadlock_timeout`) to come first. A force
/// release, which leaves the holder's binding in place, pokes the head out of the wait at once;
/// the slice ending is the backstop.
const SLICE_MARGIN_US: i64 = 100_000;

/// Sleeps once on `blocker`, read at `now`, until it may have gone or `deadline` (`None`:
/// without limit). A release wakes the head sooner (it heads the queue).
pub fn sleep_on(blocker: Blocker, now: Timestamp, deadline: Option<Timestamp>) -> Result<(), DlockError> {
    let lease = WaitEvent::DlockLease.id();
    match blocker {
        Blocker::Expiry(expiry) => sleep_until([deadline, Some(expiry)].into_iter().flatten().min(), lease),
        // Held by this very session under another owner string: only a force release can end
        // that, so wait for its wake-up; without a deadline that is a deadlock.
        Blocker::Session(fence) if session::is_bound_here(fence) => match deadline {
            Some(_) => sleep_until(deadline, lease),
            None => return Err(DlockError::SelfDeadlock),
        },
        // Wait in the lock manager for the holder's session (deadlock-checked), in slices a
        // little longer than deadlock_timeout, until a force release pokes us.
        Blocker::Session(fence) => {
            // SAFETY: reads a setting.
            let slice_us = i64::from(unsafe { pg_sys::DeadlockTimeout }) * 1000 + SLICE_MARGIN_US;
            let slice_end = now.saturating_add(slice_us);
            binding::await_unbind(fence, Some(deadline.map_or(slice_end, |d| d.min(slice_end))));
        }
        // Only a newcomer sees a queue ahead; a head never does.
        Blocker::Queue => sleep_until(deadline, lease),
    }
    Ok(())
}
