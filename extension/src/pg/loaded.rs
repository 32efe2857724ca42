//! Which dlock library this is, in this process. PostgreSQL keeps a preloaded library for the
//! server's life: after `dlock.so` is replaced, new backends of a preloaded server still run the
//! library the postmaster loaded (same path), until a restart. A process can still end up with a
//! second dlock library — one loaded from another path (`LOAD`, or a function pointing at
//! another file) where dlock is preloaded or was loaded already. That second library never saw
//! the server start, so it has none of the shared memory the first one laid out and must never
//! touch it: it runs without it (durable leases; waits without direct hand-off; no fast mode),
//! reads its settings by name (the first library defined them), and says so once.

use pgrx::pg_sys;
use std::sync::atomic::{AtomicBool, Ordering};

static SECOND: AtomicBool = AtomicBool::new(false);

/// From `_PG_init`, first: whether another dlock library already defined dlock's settings in
/// this process (a placeholder, from a `SET` before any dlock library was loaded, does not
/// count).
pub fn detect_second_library() -> bool {
    // SAFETY: GUC lookups by name, missing_ok.
    let second = unsafe {
        let name = c"dlock.max_ttl".as_ptr();
        !pg_sys::GetConfigOption(name, true, false).is_null()
            && pg_sys::GetConfigOptionFlags(name, true) & pg_sys::GUC_CUSTOM_PLACEHOLDER as i32 == 0
    };
    SECOND.store(second, Ordering::Relaxed);
    if second {
        pgrx::pg_sys::panic::ErrorReport::new(
            pgrx::PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            "dlock: this backend loaded a dlock library other than the one already running here (said once)",
            "_PG_init",
        )
        .set_hint(
            "It runs without shared memory (no fast mode, no direct hand-off) until the server is \
             restarted, so that every backend runs the installed library.",
        )
        .report(pgrx::PgLogLevel::NOTICE);
        pgrx::log!("dlock: a second dlock library was loaded in this backend; it runs without shared memory");
    }
    second
}

/// Whether this is a second dlock library in this process (see the module docs).
pub fn is_second_library() -> bool {
    SECOND.load(Ordering::Relaxed)
}
