//! The end of a transaction, for every module that keeps work for it: one callback with a fixed,
//! commented order, so that commit-time work does not follow the accident of which module
//! registered a callback first (PostgreSQL calls callbacks in reverse order of registration).

use crate::elections::worker_start as elections;
use crate::fast;
use crate::locks::{key, liveness, session, watchers};
use crate::pg::backend::now;
use crate::pg::{signals, spi};
use crate::stats;
use crate::store::{self, durability};
use crate::wait::{free_waiters, key_queue, requests, wakeups};
use dlock_core::DlockError;
use pgrx::pg_sys;

fn pre_commit() {
    // 1. Still holding the key locks: a watch registered before our change is seen here, and
    //    the NOTIFY is queued for PostgreSQL to send once the commit is visible.
    watchers::notify_watched(wakeups::freed());
    // 2. Keys freed with sessions waiting to see them free are read once more, still under
    //    their key locks; those free are answered at commit, sparing each waiter a read.
    //    (Not if this transaction dropped the table: nothing to read, nobody to answer.)
    free_waiters::confirm_at_pre_commit(|key| {
        if store::relation::relations().is_none() {
            return false;
        }
        let rows = spi::connect(|spi| store::read(spi, key));
        liveness::state(&rows, now()).is_free()
    });
    // 3. Last, once nothing else will write: a transaction whose only writes were releases
    //    commits without a WAL flush.
    durability::at_pre_commit();
}

fn pre_prepare() {
    // A prepared transaction outlives this session; neither a lease handed to a waiting session
    // here nor a session-bound lease can.
    if requests::has_offers() {
        crate::pg::report::raise(
            DlockError::NoPrepare { what: "handed a released key to a waiting session" },
            "PREPARE TRANSACTION",
        );
    }
    if session::has_pending() {
        crate::pg::report::raise(
            DlockError::NoPrepare { what: "acquired or released a session-bound lease" },
            "PREPARE TRANSACTION",
        );
    }
}

fn commit() {
    // 0. The commit is written: the session's synchronous_commit is back.
    durability::at_end();
    // 1. Watches taken or ended in this transaction take effect, as their LISTEN/UNLISTEN did.
    watchers::at_end(true);
    // 2. Grants this transaction wrote for waiting heads become theirs, before the heads wake.
    requests::settle(true);
    // 3. The heads of freed keys wake (and are poked out of waits on a force-released binding).
    wakeups::at_commit();
    // 4. This session's queue places went with the transaction's locks (and its free-waits).
    key_queue::end_of_transaction();
    free_waiters::end_of_transaction();
    signals::reset();
    // 5. Session bindings made or ended here are settled: released ones let go only now.
    session::at_end(true);
    // 6. The key locks are let go by PostgreSQL after this callback: forget our notes of them.
    key::at_end();
    // 7. What this transaction did counts now; a new election leader's expiry gets watched.
    stats::at_end(true);
    elections::at_commit();
}

fn abort(prepare: bool) {
    if !prepare {
        watchers::at_end(false);
    }
    // Offers made here are taken back. An error ending a wait already left its slot, its fast
    // line and its count as it unwound; a client that hung up ends the backend from inside the
    // wait (FATAL, no unwinding), so its wait is ended here.
    requests::settle(false);
    requests::abandon();
    key_queue::end_of_transaction();
    free_waiters::end_of_transaction();
    signals::reset();
    fast::reset();
    stats::wait_ended(stats::WaitOutcome::Cancelled);
    // The rest of the transaction's events never happened.
    stats::at_end(false);
    elections::at_abort();
    wakeups::at_abort();
    durability::at_end();
    if !prepare {
        session::at_end(false);
    }
    key::at_end();
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT => pre_commit(),
        XACT_EVENT_PRE_PREPARE => pre_prepare(),
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => commit(),
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => abort(false),
        XACT_EVENT_PREPARE => abort(true),
        _ => {}
    }
}

/// Registers the callback; once, from `_PG_init`.
pub fn register() {
    // SAFETY: a plain C callback with no argument, registered once per backend.
    unsafe { pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut()) };
}
