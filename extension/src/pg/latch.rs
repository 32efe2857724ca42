//! Sleeping on the latch while watching the client's socket: a backend that waits on its own
//! (not in the lock manager) ends its wait the moment its client hangs up, rather than waiting
//! for a lease nobody will use.

use crate::pg::{backend, version};
use dlock_core::Timestamp;
use pgrx::pg_sys;

/// The client's socket, if this backend serves a client and can see it close.
fn client_socket() -> Option<pg_sys::pgsocket> {
    // SAFETY: asks whether the platform's wait events report a closed socket.
    version::client_socket().filter(|_| unsafe { pg_sys::WaitEventSetCanReportClosed() })
}

/// Waits for the latch, the client hanging up, or `timeout_ms` (`None`: no limit); then serves
/// interrupts. A hung-up client ends the backend as `client_connection_check_interval` would
/// (FATAL "connection to client lost").
fn wait_for_events(latch: bool, timeout_ms: Option<i64>, wait_event: u32) {
    let socket = client_socket();
    let mut events = pg_sys::WL_EXIT_ON_PM_DEATH;
    if latch {
        events |= pg_sys::WL_LATCH_SET;
    }
    if timeout_ms.is_some() {
        events |= pg_sys::WL_TIMEOUT;
    }
    if socket.is_some() {
        events |= pg_sys::WL_SOCKET_CLOSED;
    }
    // SAFETY: the standard latch wait of a backend.
    unsafe {
        let fired = pg_sys::WaitLatchOrSocket(
            pg_sys::MyLatch,
            events as i32,
            socket.unwrap_or(pg_sys::PGINVALID_SOCKET),
            timeout_ms.map_or(-1, |ms| ms.clamp(0, i64::from(i32::MAX))) as std::ffi::c_long,
            wait_event,
        );
        if latch {
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        if fired & pg_sys::WL_SOCKET_CLOSED as i32 != 0 {
            pg_sys::ClientConnectionLost = 1;
            pg_sys::InterruptPending = 1;
        }
    }
    pg_sys::check_for_interrupts!();
}

/// Sleeps on the latch until `until` (`None`: until woken), showing `wait_event` in
/// `pg_stat_activity`; a client that hangs up ends the wait at once.
pub fn sleep_until(until: Option<Timestamp>, wait_event: u32) {
    wait_for_events(true, until.map(|u| ((u - backend::now()).max(0) + 999) / 1000), wait_event);
}

/// Ends the backend now if its client hung up (a zero-timeout look at the socket).
pub fn ensure_client_connected() {
    if client_socket().is_some() {
        wait_for_events(false, Some(0), pg_sys::PG_WAIT_EXTENSION);
    }
}
