//! The FIFO wait queue of a key, kept by PostgreSQL's lock manager: waiters line up for the
//! key's queue lock, which the lock manager grants strictly in arrival order (all requests are
//! exclusive). The holder is the head: the only waiter that watches the lease itself. Everyone
//! behind it sleeps in the lock manager, costing no CPU, and moves up the moment the head leaves
//! — granted, timed out or cancelled (a cancelled request leaves the queue with its transaction).
//!
//! Queue locks belong to the top transaction (`keylock.rs`), so a savepoint rolled back does not
//! let them go by itself: a wait cancelled inside a savepoint, or a grant that a rollback to a
//! savepoint undid, would leave its session at the head of the queue, blocking everyone behind
//! until its transaction ends. So this session's queue entries remember the subtransaction
//! that joined, and a subtransaction abort leaves the queues it joined (`sub_end`).
//!
//! Preloaded, shared memory also counts the sessions in queues, per bucket of key hashes
//! (`occupancy`), so that the common case — nobody waits — costs no lock-manager lookup at all.

use crate::keylock::{self, SPACE_QUEUE, tag};
use crate::lease::Timestamp;
use crate::lockwait;
use crate::pending::Pending;
use crate::waitslot;
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
    let queue = tag(SPACE_QUEUE, hash);
    if keylock::acquire(&queue, pg_sys::ExclusiveLock, false, false) {
        keylock::release(&queue, pg_sys::ExclusiveLock, false);
        false
    } else {
        true
    }
}

/// Joins the queue and waits to become its head, no later than `deadline`; whether it did.
pub fn join(hash: u64, deadline: Option<Timestamp>) -> bool {
    // Counted before the request exists, so that whoever sees the request also sees the count.
    occupancy::enter(hash);
    MINE.with(|m| m.borrow_mut().push(Entry { hash, head: Cell::new(false) }));
    let joined = lockwait::acquire_until(&tag(SPACE_QUEUE, hash), pg_sys::ExclusiveLock, deadline);
    MINE.with(|m| {
        let mut mine = m.borrow_mut();
        // The newest entry of this key that is not at a head is this join.
        let this = |e: &Entry| e.hash == hash && !e.head.get();
        if joined {
            if let Some(e) = mine.iter().filter(|e| this(e)).last() {
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
        keylock::release(&tag(SPACE_QUEUE, hash), pg_sys::ExclusiveLock, false);
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
            keylock::release(&tag(SPACE_QUEUE, e.hash), pg_sys::ExclusiveLock, false);
            waitslot::abandon();
        }
        occupancy::exit(e.hash);
    }
}

/// The head of the key's queue (the holder of its queue lock), if any.
pub fn head(hash: u64) -> Option<&'static mut pg_sys::PGPROC> {
    if occupancy::surely_empty(hash) {
        return None;
    }
    let queue = tag(SPACE_QUEUE, hash);
    // SAFETY: GetLockConflicts returns the holders' virtual transaction ids (never ours); the
    // proc array lives in shared memory for the postmaster's life.
    unsafe {
        let mut count = 0;
        let holders = pg_sys::GetLockConflicts(&queue, pg_sys::AccessExclusiveLock as i32, &mut count);
        if holders.is_null() || count == 0 {
            return None;
        }
        let procs = std::slice::from_raw_parts_mut(
            (*pg_sys::ProcGlobal).allProcs,
            (*pg_sys::ProcGlobal).allProcCount as usize,
        );
        // The queue lock is exclusive: one holder.
        let vxid = *holders;
        procs.iter_mut().find(|p| p.backendId == vxid.backendId && p.lxid == vxid.localTransactionId)
    }
}

/// Wakes the head of the key's queue, if any, so it re-reads the lease (or its slot).
pub fn wake_head(hash: u64) {
    if let Some(proc) = head(hash) {
        // SAFETY: setting another backend's latch is how PostgreSQL wakes it.
        unsafe { pg_sys::SetLatch(&mut proc.procLatch) };
    }
}

/// Pokes the head of the key's queue, if any (`interrupt::poke`): it holds our queue lock, so
/// it is a dlock backend with the handler installed.
pub fn poke_head(hash: u64) {
    if let Some(proc) = head(hash) {
        crate::interrupt::poke(proc.pid);
    }
}

/// Sessions in queues (heads and those in line), counted per bucket of key hashes in shared
/// memory. A count is raised before the queue lock is requested and lowered after it is let go
/// (at `leave`, a subtransaction abort, or the end of the transaction), so a zero proves that
/// no queue of the bucket's keys has anyone: whoever then looks for a head holds the key lock,
/// which a head takes only after joining. Without preload nothing is counted and every lookup
/// is made.
pub(crate) mod occupancy {
    use pgrx::pg_sys;
    use std::sync::atomic::{AtomicU32, Ordering};

    const BUCKETS: usize = 1024;

    static mut COUNTS: *const AtomicU32 = std::ptr::null();

    fn bucket(hash: u64) -> usize {
        (hash % BUCKETS as u64) as usize
    }

    fn counts() -> Option<&'static [AtomicU32]> {
        // SAFETY: set once by the postmaster before backends fork; the memory is shared memory
        // sized for BUCKETS counters.
        unsafe {
            let base = *std::ptr::addr_of!(COUNTS);
            (!base.is_null()).then(|| std::slice::from_raw_parts(base, BUCKETS))
        }
    }

    /// Whether no session is in a queue of the bucket of `hash` (always false without preload).
    pub fn surely_empty(hash: u64) -> bool {
        counts().is_some_and(|c| c[bucket(hash)].load(Ordering::SeqCst) == 0)
    }

    /// One more session in a queue of the bucket of `hash` (paired with `exit` by `MINE`).
    pub(super) fn enter(hash: u64) {
        if let Some(c) = counts() {
            c[bucket(hash)].fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(super) fn exit(hash: u64) {
        if let Some(c) = counts() {
            c[bucket(hash)].fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Asks for the counters' memory (`shmem.rs`'s request hook).
    pub(crate) fn request() {
        // SAFETY: the postmaster's shared memory request phase.
        unsafe { pg_sys::RequestAddinShmemSpace(BUCKETS * std::mem::size_of::<AtomicU32>()) };
    }

    /// Sets the counters up, all zero (`shmem.rs`'s startup hook; after a crash restart too,
    /// when every session that counted is gone).
    pub(crate) fn startup() {
        // SAFETY: runs in the postmaster before any backend; the struct is ours alone.
        unsafe {
            let size = BUCKETS * std::mem::size_of::<AtomicU32>();
            let mut found = false;
            let base = pg_sys::ShmemInitStruct(c"dlock queue counts".as_ptr(), size, &mut found);
            if !found {
                std::ptr::write_bytes(base as *mut u8, 0, size);
            }
            COUNTS = base as *const AtomicU32;
        }
    }
}
