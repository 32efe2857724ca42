//! dlock's shared memory, only with `shared_preload_libraries = 'dlock'`: one pair of
//! PostgreSQL hooks, chained once, that sizes and sets up the wait table (`wait/requests.rs`), the
//! queue counts (`wait/occupancy.rs`), the owner rows' counts (`store/owner_rows.rs`), the
//! free-waiters' answer slots (`wait/answers.rs`) and fast mode's table (`fast/`), whose
//! server-start settings are defined first.

use crate::fast;
use crate::pg::shmem_cell::PrevHook;
use crate::stats;
use crate::store::owner_rows;
use crate::wait::{answers, occupancy, requests};
use pgrx::pg_sys;

/// The hooks installed before dlock's, called first by dlock's.
static PREV_REQUEST: PrevHook = PrevHook::new();
static PREV_STARTUP: PrevHook = PrevHook::new();

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request() {
    // SAFETY: the hook installed before ours, called first, in the phase it was installed for
    // (the postmaster's shared memory request phase).
    unsafe {
        if let Some(prev) = PREV_REQUEST.get() {
            prev();
        }
    }
    requests::request();
    occupancy::request();
    owner_rows::request();
    answers::request();
    fast::request();
    stats::request();
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup() {
    // SAFETY: the hook installed before ours, called first, where it was installed for: in the
    // postmaster (and again after a crash restart), before any backend.
    unsafe {
        if let Some(prev) = PREV_STARTUP.get() {
            prev();
        }
    }
    requests::startup();
    occupancy::startup();
    owner_rows::startup();
    answers::startup();
    fast::startup();
    stats::startup();
}

/// From `_PG_init`: while preloading, defines the server-start settings and chains the hooks
/// (a server-start setting can only be defined then; otherwise there is no shared memory).
pub fn register() {
    // SAFETY: PostgreSQL's hook variables, read and set once, in the postmaster while it loads
    // the preload libraries.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        crate::settings::define_at_server_start();
        PREV_REQUEST.set(pg_sys::shmem_request_hook);
        pg_sys::shmem_request_hook = Some(request);
        PREV_STARTUP.set(pg_sys::shmem_startup_hook);
        pg_sys::shmem_startup_hook = Some(startup);
    }
}
