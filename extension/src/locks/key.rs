//! The key lock: serialises every read-decide-write on a key. Held to commit by whoever changed
//! the key; given back at once by a call that changed nothing. A hash collision only serialises
//! two keys, it never merges their leases (the row is keyed by the full text). A fencing check
//! holds it in share mode until its transaction ends, so the key cannot change hands under a
//! fenced write.

use crate::locks::deadline;
use crate::locks::tags::{self, Space, tag};
use crate::pg::pending::Pending;
use dlock_core::Timestamp;
use pgrx::pg_sys;
use std::cell::RefCell;

thread_local! {
    /// Key lock holds (hash, mode) of this transaction, tagged by the subtransaction that took
    /// them: they belong to the top transaction, so a rolled-back savepoint gives back its own
    /// here (`sub_end`); what it changed under them is undone, so the keys are free again.
    static HELD: RefCell<Pending<(u64, u32)>> = const { RefCell::new(Pending::new()) };
}

fn held(hash: u64, mode: u32, got: bool) -> bool {
    if got {
        HELD.with(|h| h.borrow_mut().push((hash, mode)));
    }
    got
}

fn let_go(hash: u64, mode: u32) {
    tags::release(&tag(Space::Key, hash), mode, false);
    HELD.with(|h| h.borrow_mut().remove_last(|&held| held == (hash, mode)));
}

/// Takes the key lock in `mode` if nobody else holds it (or we already do); never blocks.
fn try_take(hash: u64, mode: u32) -> bool {
    held(hash, mode, tags::acquire(&tag(Space::Key, hash), mode, false, false))
}

/// Takes the key lock in `mode`, waiting no later than `until` (`None`: no limit).
fn take_until(hash: u64, mode: u32, until: Option<Timestamp>) -> bool {
    held(hash, mode, deadline::acquire_until(&tag(Space::Key, hash), mode, until))
}

/// A try, or a wait whose deadline came, found the key lock taken. If a sweep holds it (a grant
/// deleting a row of the key whose lease was over: no lease changes), the key is not busy:
/// waits for that grant's commit, no longer than `deadlock_timeout`, and takes the key lock in
/// `mode`. Anything else holding it answers at once: false. No mark may also mean that the
/// sweep's commit let go of the mark and not yet of the key lock (one call lets go of both, in
/// the lock table's partition order): hence one more try.
fn after_sweep(hash: u64, mode: u32) -> bool {
    if !tags::held_elsewhere(&tag(Space::Sweep, hash), pg_sys::ShareLock) {
        return try_take(hash, mode);
    }
    // SAFETY: reads a setting.
    let slice_us = i64::from(unsafe { pg_sys::DeadlockTimeout }) * 1000;
    take_until(hash, mode, Some(crate::pg::backend::now().saturating_add(slice_us)))
}

/// Takes the key lock if nobody else holds it (or we already do), or once a sweep of the key
/// that holds it commits ([`after_sweep`]); never waits for anything else.
pub fn try_lock_key(hash: u64) -> bool {
    try_take(hash, pg_sys::ExclusiveLock) || after_sweep(hash, pg_sys::ExclusiveLock)
}

/// Takes the key lock for a sweep of one of its rows, if nobody else holds it; never blocks.
/// The sweep mark comes first and stays to commit with the key lock, so that whoever finds the
/// key lock taken by a sweep always sees the mark ([`after_sweep`]).
pub fn try_lock_key_for_sweep(hash: u64) -> bool {
    let mark = tag(Space::Sweep, hash);
    if !tags::acquire(&mark, pg_sys::ExclusiveLock, false, false) {
        return false; // another backend sweeps the key
    }
    if try_take(hash, pg_sys::ExclusiveLock) {
        return true;
    }
    tags::release(&mark, pg_sys::ExclusiveLock, false);
    false
}

/// Gives back what [`try_lock_key_for_sweep`] took, when the sweep changed nothing.
pub fn unlock_key_after_sweep(hash: u64) {
    unlock_key(hash);
    tags::release(&tag(Space::Sweep, hash), pg_sys::ExclusiveLock, false);
}

/// Takes the key lock, waiting for the transaction that holds it (deadlock-checked, cancellable).
pub fn lock_key(hash: u64) {
    held(
        hash,
        pg_sys::ExclusiveLock,
        tags::acquire(&tag(Space::Key, hash), pg_sys::ExclusiveLock, false, true),
    );
}

/// Takes the key lock, waiting no later than `deadline` (`None`: no limit), and past it for a
/// sweep of the key ([`after_sweep`]); whether it got it.
pub fn lock_key_until(hash: u64, until: Option<Timestamp>) -> bool {
    take_until(hash, pg_sys::ExclusiveLock, until) || after_sweep(hash, pg_sys::ExclusiveLock)
}

/// Takes the key lock in share mode, waiting no later than `deadline`: taking a key shared
/// (without a semaphore's count) changes nothing another shared taker depends on, so shared
/// takers proceed side by side, and anyone who takes the key exclusively waits for all of them.
pub fn lock_key_shared_until(hash: u64, until: Option<Timestamp>) -> bool {
    take_until(hash, pg_sys::ShareLock, until) || after_sweep(hash, pg_sys::ShareLock)
}

/// Takes the key lock in share mode if no exclusive holder or waiter is in the way (or once a
/// sweep of the key commits); never waits for anything else.
pub fn try_lock_key_shared(hash: u64) -> bool {
    try_take(hash, pg_sys::ShareLock) || after_sweep(hash, pg_sys::ShareLock)
}

/// Takes the key lock in share mode: the key cannot change hands until this transaction ends.
pub fn share_key(hash: u64) {
    held(hash, pg_sys::ShareLock, tags::acquire(&tag(Space::Key, hash), pg_sys::ShareLock, false, true));
}

/// Gives back a share hold taken by `share_key` when there was nothing to protect.
pub fn unshare_key(hash: u64) {
    let_go(hash, pg_sys::ShareLock);
}

/// Gives back the latest hold of the key lock (in whichever mode it was taken) before commit;
/// only when nothing was changed under it.
pub fn unlock_key(hash: u64) {
    let mode = HELD.with(|h| h.borrow().iter().rev().find(|(held, _)| *held == hash).map(|&(_, mode)| mode));
    let_go(hash, mode.unwrap_or(pg_sys::ExclusiveLock));
}

/// Whether this transaction holds the key lock of this hash exclusively (nobody else can change
/// the key until it ends).
pub fn holds_exclusively(hash: u64) -> bool {
    HELD.with(|h| h.borrow().iter().any(|&held| held == (hash, pg_sys::ExclusiveLock)))
}

/// The transaction ended: PostgreSQL lets its key locks go.
pub fn at_end() {
    HELD.with(|h| h.borrow_mut().take());
}

/// A subtransaction ended (`hooks/subxact.rs`): a released one's holds are its parent's; a rolled-back
/// one gives back its own.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    if commit {
        HELD.with(|h| h.borrow_mut().sub_commit(sub, parent));
    } else {
        for (hash, mode) in HELD.with(|h| h.borrow_mut().sub_abort(sub)) {
            tags::release(&tag(Space::Key, hash), mode, false);
        }
    }
}
