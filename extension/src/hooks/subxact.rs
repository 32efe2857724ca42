//! The end of a subtransaction, for every module that keeps its changes per subtransaction
//! (`pending.rs`): a released savepoint hands them to its parent, a rolled-back one undoes them.
//! One callback, in a fixed order: key locks go last, so that a session that takes a key lock
//! given back here finds everything done under it already undone.

use crate::elections::worker_start as elections;
use crate::locks::{key, session, watchers};
use crate::stats;
use crate::wait::{key_queue, requests, wakeups};
use pgrx::pg_sys;

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    sub: pg_sys::SubTransactionId,
    parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    let commit = match event {
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => true,
        pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => false,
        _ => return,
    };
    watchers::sub_end(sub, parent, commit);
    key_queue::sub_end(sub, parent, commit);
    // A hand-off written in a savepoint that rolls back was undone with it, and so was the
    // freeing that caused it.
    requests::settle_sub(sub, parent, commit);
    wakeups::sub_end(sub, parent, commit);
    session::sub_end(sub, parent, commit);
    key::sub_end(sub, parent, commit);
    stats::sub_end(sub, parent, commit);
    elections::sub_end(sub, parent, commit);
}

/// Registers the callback; once, from `_PG_init`.
pub fn register() {
    // SAFETY: a plain C callback with no argument, registered once per backend.
    unsafe { pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut()) };
}
