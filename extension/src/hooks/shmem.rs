//! dlock's shared memory, only with `shared_preload_libraries = 'dlock'`: one pair of
//! PostgreSQL hooks, chained once, that sizes and sets up the wait table (`wait/requests.rs`), the
//! queue counts (`wait/occupancy.rs`), the free-waiters' answer slots (`wait/answers.rs`) and fast mode's table (`fast/`), whose server-start
//! settings are defined first.

use crate::fast;
use crate::stats;
use crate::wait::{answers, occupancy, requests};
use pgrx::pg_sys;

static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request() {
    // SAFETY: the postmaster's shared memory request phase; the previous hook goes first.
    unsafe {
        if let Some(prev) = PREV_REQUEST {
            prev();
        }
    }
    requests::request();
    occupancy::request();
    answers::request();
    fast::request();
    stats::request();
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup() {
    // SAFETY: runs in the postmaster (and again after a crash restart), before any backend.
    unsafe {
        if let Some(prev) = PREV_STARTUP {
            prev();
        }
    }
    requests::startup();
    occupancy::startup();
    answers::startup();
    fast::startup();
    stats::startup();
}

/// From `_PG_init`: while preloading, defines the server-start settings and chains the hooks
/// (a server-start setting can only be defined then; otherwise there is no shared memory).
pub fn register() {
    // SAFETY: hooks chained once, in the postmaster.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        crate::settings::define_at_server_start();
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup);
    }
}
