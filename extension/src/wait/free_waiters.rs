//! Sessions in `dlock_wait_free`: they wait for a key to be free without taking it, so they do
//! not queue one behind another. Each holds the key's free-wait lock in share mode (the lock
//! manager lists them all) and is counted in the key's bucket of free-waiters (`occupancy.rs`); whoever frees the key
//! sets the latch of every one of them at commit, after the freeing is visible. One release
//! wakes them all, and each re-reads the key.
//!
//! No wake-up is lost: a waiter is counted, then locks, then reads; a freeing transaction makes
//! its change visible, then looks at the count, then at the lock's holders. A waiter it does not
//! find read after the change was visible.
//!
//! Preloaded, a release also answers them (a cache rebuild's thousand waiters would otherwise
//! each re-read the key): a transaction that freed a key under its exclusive key lock, with
//! free-waiters about, reads the key once more at pre-commit, and if no lease nor lock-delay
//! holds it, writes the key's hash into the answer slot of each waiter of that very key
//! (`answers.rs`) before setting its latch. Nobody can take the key between that read and the
//! wake-ups: the key lock is let go after them. A waiter trusts only an answer written after
//! its last read: when that read found the key held, it clears its slot, since an answer
//! already there may predate it.

use crate::locks::key;
use crate::locks::tags::{self, Space, tag};
use crate::pg::proc::Proc;
use crate::wait::answers;
use crate::wait::occupancy::{self, Of};
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};

thread_local! {
    /// The key hash this session waits for, while it is counted.
    static WAITING: Cell<Option<u64>> = const { Cell::new(None) };
    /// Keys this transaction freed while free-waiters may wait for them: (hash, key).
    static FREED: RefCell<Vec<(u64, String)>> = const { RefCell::new(Vec::new()) };
    /// Of those, the ones found free at pre-commit under our exclusive key lock.
    static FREE_AT_COMMIT: RefCell<Vec<(u64, String)>> = const { RefCell::new(Vec::new()) };
}

/// The open transaction freed `key`: if sessions may be waiting for it to be free, it is read
/// again at pre-commit (`confirm_at_pre_commit`) to answer them.
pub fn freed(hash: u64, key: &str) {
    if answers::available() && !occupancy::surely_none(Of::FreeWaits, hash) {
        FREED.with(|f| f.borrow_mut().push((hash, key.to_owned())));
    }
}

/// Pre-commit, nothing more to change: of the keys freed, those whose key lock this transaction
/// holds exclusively and which `is_free` finds free are answered at commit.
pub fn confirm_at_pre_commit(is_free: impl Fn(&str) -> bool) {
    let freed = FREED.with(|f| f.take());
    let free: Vec<(u64, String)> =
        freed.into_iter().filter(|(hash, key)| key::holds_exclusively(*hash) && is_free(key)).collect();
    FREE_AT_COMMIT.with(|f| *f.borrow_mut() = free);
}

/// The key with this hash, if the committed transaction found it free at pre-commit.
pub fn free_at_commit(hash: u64) -> Option<String> {
    FREE_AT_COMMIT.with(|f| f.borrow().iter().find(|(h, _)| *h == hash).map(|(_, key)| key.clone()))
}

/// This session waits for the key to be free until dropped (or its transaction ends).
pub struct Waiting {
    hash: u64,
}

/// Starts waiting for `key` (of this hash) to be free: published in the answer slot, counted,
/// then its lock taken.
pub fn start(key: &str, hash: u64) -> Waiting {
    answers::start(key);
    occupancy::enter_as(Of::FreeWaits, hash);
    WAITING.with(|w| w.set(Some(hash)));
    tags::acquire(&tag(Space::FreeWait, hash), pg_sys::ShareLock, false, true);
    Waiting { hash }
}

impl Drop for Waiting {
    /// The wait is over (returned, or unwinding from an error): uncounted and unlocked. (A
    /// backend that exits meanwhile is uncounted by its transaction's end, `end_of_transaction`.)
    fn drop(&mut self) {
        if WAITING.with(|w| w.take()).is_some() {
            occupancy::exit_as(Of::FreeWaits, self.hash);
            if !std::thread::panicking() {
                tags::release(&tag(Space::FreeWait, self.hash), pg_sys::ShareLock, false);
            }
        }
    }
}

/// The transaction ended (its locks went with it): uncounts a wait it interrupted, and forgets
/// what it freed.
pub fn end_of_transaction() {
    FREED.with(|f| f.borrow_mut().clear());
    FREE_AT_COMMIT.with(|f| f.borrow_mut().clear());
    if let Some(hash) = WAITING.with(|w| w.take()) {
        occupancy::exit_as(Of::FreeWaits, hash);
    }
}

/// Wakes every session waiting for the key with this hash to be free; `free`: the key found
/// free under the key lock (`free_at_commit`), whose own waiters are told so.
pub fn wake(hash: u64, free: Option<&str>) {
    if occupancy::surely_none(Of::FreeWaits, hash) {
        return;
    }
    let lock = tag(Space::FreeWait, hash);
    // SAFETY: GetLockConflicts lists the holders' virtual transaction ids (never ours), ended by
    // an invalid one; the proc array lives in shared memory for the postmaster's life.
    let holders = unsafe {
        let mut count = 0;
        let holders = pg_sys::GetLockConflicts(&lock, pg_sys::AccessExclusiveLock as i32, &mut count);
        if holders.is_null() {
            return;
        }
        Proc::all_of(std::slice::from_raw_parts(holders, count.max(0) as usize))
    };
    for proc in holders {
        if let Some(key) = free {
            answers::answer(proc, key, hash);
        }
        proc.set_latch();
    }
}
