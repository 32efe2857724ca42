//! The FIFO wait queue of a key, kept by PostgreSQL's lock manager: waiters line up for the
//! key's queue lock, which the lock manager grants strictly in arrival order (all requests are
//! exclusive). The holder is the head: the only waiter that watches the lease itself. Everyone
//! behind it sleeps in the lock manager, costing no CPU, and moves up the moment the head leaves
//! — granted, timed out or cancelled (a cancelled request leaves the queue with its transaction).

use crate::keylock::{self, SPACE_QUEUE, tag};
use crate::lease::Timestamp;
use crate::lockwait;
use pgrx::pg_sys;

/// Whether anyone waits for the key (a head, and so possibly a line). Never blocks.
pub fn is_occupied(hash: u64) -> bool {
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
    lockwait::acquire_until(&tag(SPACE_QUEUE, hash), pg_sys::ExclusiveLock, deadline)
}

/// Leaves the head of the queue: the next in line becomes head at once.
pub fn leave(hash: u64) {
    keylock::release(&tag(SPACE_QUEUE, hash), pg_sys::ExclusiveLock, false);
}

/// The head of the key's queue (the holder of its queue lock), if any.
pub fn head(hash: u64) -> Option<&'static mut pg_sys::PGPROC> {
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
