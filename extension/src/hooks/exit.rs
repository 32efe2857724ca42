//! A session that ends while holding session-bound leases frees them on its way out: first thing
//! at exit, like temporary-table cleanup, it leaves whatever transaction the exit interrupted,
//! lets the bindings go and tells the watchers in a transaction of its own; its queue heads are
//! granted by the lock manager the moment the bindings go (they wait on them), and woken again
//! once all its locks are gone.

use crate::locks::{session, watchers};
use crate::wait::{free_waiters, key_queue};
use pgrx::pg_sys;
use std::cell::Cell;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

/// An error here ends the backend all the same (errors are FATAL during exit); the bindings then
/// go with the session's locks and only the NOTIFY is lost.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn before_exit(_code: i32, _arg: pg_sys::Datum) {
    // SAFETY: the backend's own transaction machinery, as used by RemoveTempRelationsCallback.
    unsafe {
        pg_sys::AbortOutOfAnyTransaction();
        if session::bound_key_hashes().is_empty() {
            return;
        }
        pg_sys::StartTransactionCommand();
        let hashes = session::unbind_all();
        watchers::notify_watched(hashes.iter().copied());
        pg_sys::CommitTransactionCommand();
        for hash in hashes {
            key_queue::wake_head(hash);
            free_waiters::wake(hash, None);
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, _arg: pg_sys::Datum) {
    for hash in session::bound_key_hashes() {
        key_queue::wake_head(hash);
        free_waiters::wake(hash, None);
    }
}

/// Makes this backend free its session-bound leases when it exits: `before_exit` above, and as
/// a fallback an on_shmem_exit callback that runs after `ShutdownPostgres` released the
/// session's locks (so the woken heads find the bindings gone) and while the proc array is still
/// attached. Registered on the first binding, in the backend itself (a preloading postmaster's
/// callbacks are not inherited), so after `ShutdownPostgres`, and so run before it.
pub fn free_bound_leases_on_exit() {
    if !ARMED.with(|armed| armed.replace(true)) {
        // SAFETY: registers callbacks with no argument.
        unsafe {
            pg_sys::on_shmem_exit(Some(on_exit), pg_sys::Datum::from(0));
            pg_sys::before_shmem_exit(Some(before_exit), pg_sys::Datum::from(0));
        }
    }
}
