//! Noticing, while a backend waits in the lock manager, that its client hung up. There it does
//! not watch its socket: the hang-up arrives as a signal (`signals::arm_socket`), and
//! PostgreSQL acts on that only while `client_connection_check_interval` is on, whose timer is
//! the backstop: every 30 s, since each tick wakes every queued waiter (at 1 s, 200 waiters
//! cost about 0.6 % of a core).

use crate::pg::{ffi, guc, signals, version};
use pgrx::pg_sys;

const CLIENT_CHECK_MS: i32 = 30_000;

/// Turns on the client connection check for the coming wait, if the session has none. Setting
/// `client_connection_check_interval` alone is not enough mid-statement: PostgreSQL arms its
/// timer when a command starts, so arm it here; it re-arms itself while the setting is on.
///
/// # Safety
/// The caller opened a GUC nest level that it closes after the wait.
pub unsafe fn watch() {
    signals::arm_socket();
    // SAFETY: as the caller promised; the timeout module is initialised in backends.
    unsafe {
        if pg_sys::client_connection_check_interval == 0 && !pg_sys::MyProcPort.is_null() {
            guc::set_saved(c"client_connection_check_interval", &CLIENT_CHECK_MS.to_string());
            if !ffi::get_timeout_active(version::CLIENT_CONNECTION_CHECK_TIMEOUT) {
                ffi::enable_timeout_after(version::CLIENT_CONNECTION_CHECK_TIMEOUT, CLIENT_CHECK_MS);
            }
        }
    }
}

/// Runs a wait `f` that sleeps in the lock manager or on a condition variable while the
/// client's hang-up is signalled (an error in `f` leaves the rest to the transaction's end).
pub fn watching<R>(f: impl FnOnce() -> R) -> R {
    guc::nested(|| {
        // SAFETY: inside the nest level just opened.
        unsafe { watch() };
        let result = f();
        signals::disarm_socket();
        result
    })
}
