//! Hand-off: whoever frees a key wakes the head of its queue, and only once the freeing is
//! visible. Releases (and release_all, force release) note their keys; the commit callback
//! wakes the heads after the commit is visible and before the key locks are let go, so a woken
//! head blocks on the key lock for microseconds and then reads the freed lease. A rollback wakes
//! no one. A session that ends while holding session-bound leases wakes their heads on its way
//! out, after its locks — the bindings — are gone.

use crate::queue;
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};

thread_local! {
    /// Key hashes freed by the open transaction.
    static FREED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static EXIT_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Notes that the open transaction freed (or shortened) the lease of the key with this hash.
pub fn wake_at_commit(hash: u64) {
    FREED.with(|f| f.borrow_mut().push(hash));
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            for hash in FREED.with(|f| std::mem::take(&mut *f.borrow_mut())) {
                queue::wake_head(hash);
            }
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE => {
            FREED.with(|f| f.borrow_mut().clear())
        }
        _ => {}
    }
}

/// Registers the commit callback; called once from `_PG_init`.
pub fn register_callbacks() {
    // SAFETY: a plain C callback with no argument, registered once per backend.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, _arg: pg_sys::Datum) {
    for hash in crate::session::bound_key_hashes() {
        queue::wake_head(hash);
    }
}

/// Makes this backend wake the heads of its session-bound leases' queues when it exits. An
/// on_shmem_exit callback runs after `ShutdownPostgres` released the session's locks (so the
/// woken heads find the bindings gone) and while the proc array is still attached. Registered
/// on the first binding, in the backend itself (a preloading postmaster's callbacks are not
/// inherited).
pub fn wake_on_exit() {
    if !EXIT_HOOK.with(|h| h.replace(true)) {
        // SAFETY: registers a callback with no argument.
        unsafe { pg_sys::on_shmem_exit(Some(on_exit), pg_sys::Datum::from(0)) };
    }
}
