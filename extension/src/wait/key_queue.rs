//! The FIFO wait queue of a key, kept by PostgreSQL's lock manager: waiters line up for the
//! key's queue lock, which the lock manager grants strictly in arrival order (all requests are
//! exclusive). The holder is the head: the only waiter that watches the lease itself. Everyone
//! behind it sleeps in the lock manager, costing no CPU, and moves up the moment the head leaves
//! — granted, timed out or cancelled (a cancelled request leaves the queue with its transaction).
//!
//! Queue locks belong to the top transaction (`locks/tags.rs`), so a savepoint rolled back does not
//! let them go by itself: a wait cancelled inside a savepoint, or a grant that a rollback to a
//! savepoint undid, would leave its session at the head of the queue, blocking everyone behind
//! until its transaction ends. So this session's queue entries remember the subtransaction
//! that joined, and a subtransaction abort leaves the queues it joined (`sub_end`).
//!
//! A line of n waiters in one lock's queue makes PostgreSQL's deadlock check cost O(n^3) per
//! waiter (every waiter ahead is a soft edge, re-walked with a linear visited list): 1,000
//! waiters arriving together cost about 20 s of both cores, a second after they park. So a
//! waiter that holds no queue lock itself joins with the check off (`deadlock_timeout` at its
//! maximum for that wait), and that loses no deadlock: in any cycle through its wait, the head
//! it waits for holds a queue lock, so the head's own wait — on another lock, or on a queue
//! with the check on — is checked, finds the cycle and ends it.
//!
//! Preloaded, shared memory also counts the sessions in queues, per bucket of key hashes
//! (`wait/occupancy.rs`), so that the common case — nobody waits — costs no lock-manager lookup at all.

use crate::locks::deadline::{self, DeadlockCheck, Poke};
use crate::locks::tags::{self, Space, tag};
use crate::pg::pending::Pending;
use crate::pg::proc::Proc;
use crate::pg::signals;
use crate::wait::{occupancy, requests};
use dlock_core::Timestamp;
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};

/// One queue this session is in (or joining), counted in `occupancy`.
struct Entry {
    hash: u64,
    /// At the head: holding the queue lock.
    head: Cell<bool>,
}

thread_local! {
    /// Tagged by the subtransaction that joined (the caller's, not a wait's internal one).
    static MINE: RefCell<Pending<Entry>> = const { RefCell::new(Pending::new()) };
}

/// Whether anyone waits for the key (a head, and so possibly a line). Never blocks.
pub fn is_occupied(hash: u64) -> bool {
    if occupancy::surely_empty(hash) {
        return false;
    }
    let queue = tag(Space::Queue, hash);
    if tags::acquire(&queue, pg_sys::ExclusiveLock, false, false) {
        tags::release(&queue, pg_sys::ExclusiveLock, false);
        false
    } else {
        true
    }
}

/// Joins the queue and waits to become its head, no later than `deadline`; whether it did.
pub fn join(hash: u64, deadline: Option<Timestamp>) -> bool {
    // Counted before the request exists, so that whoever sees the request also sees the count.
    occupancy::enter(hash);
    let holds_a_queue = MINE.with(|m| m.borrow().iter().any(|e| e.head.get()));
    MINE.with(|m| m.borrow_mut().push(Entry { hash, head: Cell::new(false) }));
    let check = if holds_a_queue { DeadlockCheck::On } else { DeadlockCheck::Off };
    let queue = tag(Space::Queue, hash);
    let joined =
        deadline::acquire_until_checked(&queue, pg_sys::ExclusiveLock, deadline, Poke::Ignored, check);
    MINE.with(|m| {
        let mut mine = m.borrow_mut();
        // The newest entry of this key that is not at a head is this join.
        let this = |e: &Entry| e.hash == hash && !e.head.get();
        if joined {
            if let Some(e) = mine.iter().rfind(|e| this(e)) {
                e.head.set(true);
            }
        } else {
            mine.remove_last(this);
        }
    });
    if !joined {
        occupancy::exit(hash);
    }
    joined
}

/// Leaves the head of the queue: the next in line becomes head at once.
pub fn leave(hash: u64) {
    let left = MINE.with(|m| m.borrow_mut().remove_last(|e| e.hash == hash && e.head.get()));
    if left.is_some() {
        tags::release(&tag(Space::Queue, hash), pg_sys::ExclusiveLock, false);
        occupancy::exit(hash);
    }
}

/// At the end of the transaction, which lets its queue locks go: uncounts them.
pub fn end_of_transaction() {
    for e in MINE.with(|m| m.borrow_mut().take()) {
        occupancy::exit(e.hash);
    }
}

/// A subtransaction ended (`subxact.rs`): what a released one joined is its parent's; a
/// rolled-back one leaves the queues it joined, and a head's published request goes with it. (A
/// join still waiting lost its request to the abort already.)
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    if commit {
        MINE.with(|m| m.borrow_mut().sub_commit(sub, parent));
        return;
    }
    for e in MINE.with(|m| m.borrow_mut().sub_abort(sub)) {
        if e.head.get() {
            tags::release(&tag(Space::Queue, e.hash), pg_sys::ExclusiveLock, false);
            requests::abandon();
        }
        occupancy::exit(e.hash);
    }
}

/// The head of the key's queue (the holder of its queue lock), if any.
pub fn head(hash: u64) -> Option<Proc> {
    if occupancy::surely_empty(hash) {
        return None;
    }
    let queue = tag(Space::Queue, hash);
    // SAFETY: GetLockConflicts returns the holders' virtual transaction ids (never ours); the
    // proc array lives in shared memory for the postmaster's life.
    unsafe {
        let mut count = 0;
        let holders = pg_sys::GetLockConflicts(&queue, pg_sys::AccessExclusiveLock as i32, &mut count);
        if holders.is_null() || count == 0 {
            return None;
        }
        // The queue lock is exclusive: one holder.
        Proc::of(*holders)
    }
}

/// Wakes the head of the key's queue, if any, so it re-reads the lease (or its slot).
pub fn wake_head(hash: u64) {
    if let Some(proc) = head(hash) {
        proc.set_latch();
    }
}

/// Pokes the head of the key's queue, if any (`interrupt::poke`): it holds our queue lock, so
/// it is a dlock backend with the handler installed.
pub fn poke_head(hash: u64) {
    if let Some(proc) = head(hash) {
        signals::poke(proc.pid());
    }
}

/// Wakes every dlock waiter in this database (a `DROP EXTENSION dlock` is under way): the heads
/// of all queues, those waiting for a key to be free, and those waiting in the lock manager for
/// a session-bound holder's binding (poked). Those in line behind a head follow it as it leaves.
pub fn wake_every_waiter() {
    let database = crate::pg::backend::database().to_u32();
    // SAFETY: a snapshot of the lock table, palloc'd in the current memory context;
    // BackendPidGetProc returns an entry of the proc array, or null.
    unsafe {
        let data = pg_sys::GetLockStatusData();
        let locks = std::slice::from_raw_parts((*data).locks, (*data).nelements as usize);
        for lock in locks {
            let t = &lock.locktag;
            if t.locktag_type != pg_sys::LockTagType::LOCKTAG_ADVISORY as u8 || t.locktag_field1 != database {
                continue;
            }
            let head = [Space::Queue as u16, Space::FreeWait as u16].contains(&t.locktag_field4)
                && lock.holdMask != 0;
            let bound_waiter =
                t.locktag_field4 == Space::Binding as u16 && lock.waitLockMode != pg_sys::NoLock as i32;
            if head {
                if let Some(proc) = Proc::from_ptr(pg_sys::BackendPidGetProc(lock.pid)) {
                    proc.set_latch();
                }
            } else if bound_waiter {
                signals::poke(lock.pid);
            }
        }
    }
}
