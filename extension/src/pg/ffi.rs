//! Every PostgreSQL declaration dlock uses that pgrx does not bind, in one place, each with the
//! header it comes from and the versions its signature was checked against. Values that differ
//! between versions live in `version.rs`.

use pgrx::pg_sys::Oid;
use std::ffi::{c_char, c_int};

unsafe extern "C-unwind" {
    /// commands/sequence.h; same in 15 and 18.
    pub fn nextval_internal(relid: Oid, check_permissions: bool) -> i64;

    /// commands/async.h; same in 15 and 18.
    pub fn Async_Listen(channel: *const c_char);
    /// commands/async.h; same in 15 and 18.
    pub fn Async_Unlisten(channel: *const c_char);
    /// commands/async.h; same in 15 and 18.
    pub fn Async_Notify(channel: *const c_char, payload: *const c_char);

    /// utils/timeout.h; same in 15 and 18 (the `TimeoutId` values differ: `version.rs`).
    pub fn enable_timeout_after(id: c_int, delay_ms: c_int);
    /// utils/timeout.h; same in 15 and 18.
    pub fn get_timeout_active(id: c_int) -> bool;
}
