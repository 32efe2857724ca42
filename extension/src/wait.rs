//! Server-side waiting for `dlock_acquire(..., wait)`. The backend sleeps on its latch with a
//! short bounded back-off and re-tries; it never wakes later than a key's `expires_at`, so an
//! expired lease changes hands promptly. While it waits it shows a waiter mark (see
//! `keylock`), which `dlock_locks.waiters` counts. Cancel, `statement_timeout` and postmaster
//! death end the wait through the usual interrupt processing; the transaction abort then drops
//! the waiter mark, so a cancelled waiter leaves no trace.

use crate::args::Micros;
use crate::current::now;
use crate::keylock;
use crate::lease::{Caller, Timestamp};
use crate::ops;
use pgrx::pg_sys;

/// First and longest sleep between attempts. The cap bounds the delay between a key becoming
/// free and a waiter noticing (well under the 50 ms the contract allows).
const FIRST_SLEEP_US: i64 = 1_000;
const MAX_SLEEP_US: i64 = 16_000;

/// Acquires `key`, waiting up to `wait` (`None`: without limit). `None` when not granted.
pub fn acquire(key: &str, caller: &Caller, ttl: Option<Micros>, wait: Option<Micros>) -> Option<i64> {
    let hash = keylock::key_hash(key);
    let deadline = wait.map(|w| now().saturating_add(w));
    let mut sleep_us = FIRST_SLEEP_US;
    let mut marked = false;
    let granted = loop {
        let mut until = None;
        if keylock::try_lock_key(hash) {
            match ops::try_acquire(key, hash, caller, ttl, marked) {
                Ok(fence) => break Some(fence),
                Err(expiry) => until = expiry,
            }
        }
        let now = now();
        if deadline.is_some_and(|d| now >= d) {
            break None;
        }
        if !marked {
            keylock::enter_waiters(hash);
            marked = true;
        }
        let mut nap = sleep_us;
        if let Some(d) = deadline {
            nap = nap.min(d - now);
        }
        if let Some(until) = until.filter(|u| *u > now) {
            nap = nap.min(until - now);
        }
        sleep(nap);
        sleep_us = (sleep_us * 2).min(MAX_SLEEP_US);
    };
    if marked {
        keylock::leave_waiters(hash);
    }
    granted
}

/// Sleeps up to `us` microseconds on the latch, then serves interrupts (cancel, timeout). A
/// client that hangs up ends the wait at once (the socket's close is one of the wake events),
/// rather than leaving its backend waiting for a lease nobody will use.
fn sleep(us: Timestamp) {
    let ms = (us.max(0) + 999) / 1000;
    // SAFETY: the standard latch wait of a backend; MyProcPort is null outside client backends.
    unsafe {
        let port = pg_sys::MyProcPort;
        let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
        let sock = if port.is_null() {
            pg_sys::PGINVALID_SOCKET
        } else {
            if pg_sys::WaitEventSetCanReportClosed() {
                events |= pg_sys::WL_SOCKET_CLOSED;
            }
            // `sock` is the first field of libpq-be.h's `struct Port` (opaque to pgrx).
            *(port as *const pg_sys::pgsocket)
        };
        let fired = pg_sys::WaitLatchOrSocket(
            pg_sys::MyLatch,
            events as i32,
            sock,
            ms.max(1) as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        if fired & pg_sys::WL_SOCKET_CLOSED as i32 != 0 {
            // What client_connection_check_interval does: FATAL "connection to client lost".
            pg_sys::ClientConnectionLost = 1;
            pg_sys::InterruptPending = 1;
        }
    }
    pg_sys::check_for_interrupts!();
}
