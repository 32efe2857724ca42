//! Wake-ups at commit: whoever frees a key (release, release_all, force release, a shortening
//! renew) wakes the head of its queue, and only once the freeing is visible. The keys are noted
//! here during the transaction; at commit (`hooks/xact.rs`) the heads are woken after the commit
//! is visible and before the key locks are let go, so a woken head blocks on the key lock for
//! microseconds and then reads the freed lease; sessions waiting for the key to be free wake too. A rollback wakes no one, and a rolled-back
//! savepoint wakes no one for what it freed. Watchers of those keys get a NOTIFY queued at
//! pre-commit (`freed`), which PostgreSQL sends after the commit.

use crate::pg::pending::Pending;
use crate::wait::{free_waiters, key_queue};
use pgrx::pg_sys;
use std::cell::RefCell;

thread_local! {
    /// Key hashes freed by the open transaction, by subtransaction.
    static FREED: RefCell<Pending<u64>> = const { RefCell::new(Pending::new()) };
    /// Key hashes force-released by the open transaction (or freed while other shared holders
    /// remain), likewise.
    static FORCED: RefCell<Pending<u64>> = const { RefCell::new(Pending::new()) };
    /// Key hashes whose watchers hear of a change though nothing was freed: a new leader.
    static CHANGED: RefCell<Pending<u64>> = const { RefCell::new(Pending::new()) };
}

/// Notes that the open transaction freed (or shortened) the lease of the key with this hash.
pub fn wake_at_commit(hash: u64) {
    FREED.with(|f| f.borrow_mut().push(hash));
}

/// Notes a force release: its key's head may wait on the old holder's binding, which stays
/// in place, so at commit the head is poked as well as woken.
pub fn poke_at_commit(hash: u64) {
    FORCED.with(|f| f.borrow_mut().push(hash));
}

/// Notes that the key's watchers should hear of this transaction (an election's new leader).
pub fn notify_at_commit(hash: u64) {
    CHANGED.with(|c| c.borrow_mut().push(hash));
}

/// The keys whose watchers hear of the open transaction: those it freed, and those it changed
/// (for the NOTIFY queued at pre-commit).
pub fn freed() -> Vec<u64> {
    let mut keys: Vec<u64> = FREED.with(|f| f.borrow().iter().copied().collect());
    keys.extend(CHANGED.with(|c| c.borrow().iter().copied().collect::<Vec<_>>()));
    keys
}

/// The transaction committed: wake (and poke) the heads of the freed keys.
pub fn at_commit() {
    CHANGED.with(|c| c.borrow_mut().take());
    for hash in FREED.with(|f| f.borrow_mut().take()) {
        key_queue::wake_head(hash);
        free_waiters::wake(hash, free_waiters::free_at_commit(hash).as_deref());
    }
    for hash in FORCED.with(|f| f.borrow_mut().take()) {
        key_queue::poke_head(hash);
        free_waiters::wake(hash, free_waiters::free_at_commit(hash).as_deref());
    }
}

/// The transaction rolled back: nothing was freed.
pub fn at_abort() {
    CHANGED.with(|c| c.borrow_mut().take());
    FORCED.with(|f| f.borrow_mut().take());
    FREED.with(|f| f.borrow_mut().take());
}

/// A subtransaction ended: a rolled-back one freed nothing.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    for list in [&FREED, &FORCED, &CHANGED] {
        list.with(|l| {
            let mut l = l.borrow_mut();
            if commit {
                l.sub_commit(sub, parent);
            } else {
                l.sub_abort(sub);
            }
        });
    }
}
