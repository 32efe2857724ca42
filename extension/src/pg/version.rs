//! What differs between the PostgreSQL versions dlock builds for (15 and 18), behind one small
//! shim each, so that no `cfg` is scattered through the code.

use pgrx::pg_sys;

/// `CLIENT_CONNECTION_CHECK_TIMEOUT` of utils/timeout.h's `TimeoutId`: 17 inserted
/// `TRANSACTION_TIMEOUT` before it.
#[cfg(feature = "pg15")]
pub const CLIENT_CONNECTION_CHECK_TIMEOUT: std::ffi::c_int = 10;
#[cfg(not(feature = "pg15"))]
pub const CLIENT_CONNECTION_CHECK_TIMEOUT: std::ffi::c_int = 11;

/// The client's socket, if this backend serves a client. `sock` is the first field of
/// libpq-be.h's `struct Port` (opaque to pgrx) in 15 through 18.
pub fn client_socket() -> Option<pg_sys::pgsocket> {
    // SAFETY: MyProcPort is null outside client backends, and points to a Port whose first
    // field is the socket otherwise.
    unsafe {
        let port = pg_sys::MyProcPort;
        (!port.is_null()).then(|| *(port as *const pg_sys::pgsocket))
    }
}

/// The wait events dlock's own waits show in `pg_stat_activity` (waits in the lock manager show
/// `Lock`/`advisory`). PostgreSQL 17 and later give extensions named events; 15 has only the
/// generic `Extension`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEvent {
    /// The head of a key's queue, watching the lease until it ends or is handed over.
    DlockLease,
    /// A fast-mode waiter, until the key is released or expires.
    DlockFast,
}

impl WaitEvent {
    /// The name shown in `pg_stat_activity.wait_event` (17 and later).
    #[cfg_attr(feature = "pg15", allow(dead_code))]
    pub fn name(self) -> &'static std::ffi::CStr {
        match self {
            WaitEvent::DlockLease => c"DlockLease",
            WaitEvent::DlockFast => c"DlockFast",
        }
    }

    /// The event's id, for `WaitLatch` and condition variables.
    #[cfg(feature = "pg15")]
    pub fn id(self) -> u32 {
        pg_sys::PG_WAIT_EXTENSION
    }

    /// The event's id, registered once per backend (`WaitEventExtensionNew` returns the same
    /// id to every backend that asks for the same name).
    #[cfg(not(feature = "pg15"))]
    pub fn id(self) -> u32 {
        use std::cell::Cell;
        thread_local! {
            static IDS: [Cell<u32>; 2] = const { [Cell::new(0), Cell::new(0)] };
        }
        let slot = self as usize;
        IDS.with(|ids| {
            if ids[slot].get() == 0 {
                // SAFETY: registers (or looks up) a named event in shared memory.
                ids[slot].set(unsafe { pg_sys::WaitEventExtensionNew(self.name().as_ptr()) });
            }
            ids[slot].get()
        })
    }
}
