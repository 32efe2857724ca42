//! Sessions in `dlock_wait_free`: they wait for a key to be free without taking it, so they do
//! not queue one behind another. Each holds the key's free-wait lock in share mode (the lock
//! manager lists them all) and is counted in the key's bucket of free-waiters (`occupancy.rs`); whoever frees the key
//! sets the latch of every one of them at commit, after the freeing is visible. One release
//! wakes them all, and each re-reads the key.
//!
//! No wake-up is lost: a waiter is counted, then locks, then reads; a freeing transaction makes
//! its change visible, then looks at the count, then at the lock's holders. A waiter it does not
//! find read after the change was visible.

use crate::locks::tags::{self, Space, tag};
use crate::pg::version;
use crate::wait::occupancy::{self, Of};
use pgrx::pg_sys;
use std::cell::Cell;

thread_local! {
    /// The key hash this session waits for, while it is counted.
    static WAITING: Cell<Option<u64>> = const { Cell::new(None) };
}

/// This session waits for the key to be free until dropped (or its transaction ends).
pub struct Waiting {
    hash: u64,
}

/// Starts waiting for the key with this hash to be free: counted, then its lock taken.
pub fn start(hash: u64) -> Waiting {
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

/// The transaction ended (its locks went with it): uncounts a wait it interrupted.
pub fn end_of_transaction() {
    if let Some(hash) = WAITING.with(|w| w.take()) {
        occupancy::exit_as(Of::FreeWaits, hash);
    }
}

/// Wakes every session waiting for the key with this hash to be free.
pub fn wake(hash: u64) {
    if occupancy::surely_none(Of::FreeWaits, hash) {
        return;
    }
    let lock = tag(Space::FreeWait, hash);
    // SAFETY: GetLockConflicts lists the holders' virtual transaction ids (never ours), ended by
    // an invalid one; the proc array lives in shared memory for the postmaster's life.
    unsafe {
        let mut count = 0;
        let holders = pg_sys::GetLockConflicts(&lock, pg_sys::AccessExclusiveLock as i32, &mut count);
        if holders.is_null() {
            return;
        }
        for proc in version::procs_of(std::slice::from_raw_parts(holders, count.max(0) as usize)) {
            pg_sys::SetLatch(&mut proc.procLatch);
        }
    }
}
