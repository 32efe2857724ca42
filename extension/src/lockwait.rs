//! Waiting for a heavyweight lock until a deadline. PostgreSQL's lock waits have no timeout
//! argument, only the `lock_timeout` setting, which ends the wait with an ERROR. So a bounded
//! wait runs in an internal subtransaction with `lock_timeout` set to the time left, and the
//! timeout error is caught and rolled back (as a PL/pgSQL exception block would) — this path
//! costs a subtransaction, but only for a caller that actually has to wait with a deadline.
//! Unbounded waits run with `lock_timeout` off, so a session's own `lock_timeout` cannot cut a
//! `wait => NULL` short; cancel and `statement_timeout` end every wait as usual. While waiting,
//! the client socket signals a hang-up (`interrupt.rs`), and a pokeable wait also ends early
//! when poked.

use crate::current::now;
use crate::interrupt;
use crate::keylock;
use crate::lease::Timestamp;
use pgrx::pg_sys;
use pgrx::{PgSqlErrorCode, PgTryBuilder};
use std::ffi::CString;

/// Sets a setting until `AtEOXact_GUC(.., level)` (the protocol of a function's SET clause).
unsafe fn set_guc(name: &std::ffi::CStr, value: &str) {
    let value = CString::new(value).expect("no NUL in a number");
    // SAFETY: caller opened a GUC nest level.
    unsafe {
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
    }
}

/// While queued in the lock manager a backend does not watch its client socket. Its hang-up
/// arrives as a signal (`interrupt::arm_socket`); PostgreSQL acts on that only while
/// `client_connection_check_interval` is on, and its timer is the backstop: every 30 s, since
/// each tick wakes every queued waiter (at 1 s, 200 waiters cost about 0.6 % of a core).
const CLIENT_CHECK_MS: i32 = 30_000;

// utils/timeout.h, which pgrx does not bind.
const CLIENT_CONNECTION_CHECK_TIMEOUT: std::ffi::c_int = 10;
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn get_timeout_active(id: std::ffi::c_int) -> bool;
}

/// Turns on the client connection check for the coming wait, if the session has none. Setting
/// `client_connection_check_interval` alone is not enough mid-statement: PostgreSQL arms its
/// timer when a command starts, so arm it here; it re-arms itself while the setting is on.
unsafe fn watch_client() {
    crate::interrupt::arm_socket();
    // SAFETY: caller opened a GUC nest level; the timeout module is initialised in backends.
    unsafe {
        if pg_sys::client_connection_check_interval == 0 && !pg_sys::MyProcPort.is_null() {
            set_guc(c"client_connection_check_interval", &CLIENT_CHECK_MS.to_string());
            if !get_timeout_active(CLIENT_CONNECTION_CHECK_TIMEOUT) {
                enable_timeout_after(CLIENT_CONNECTION_CHECK_TIMEOUT, CLIENT_CHECK_MS);
            }
        }
    }
}

/// Whether a poke (`interrupt::poke`) may end the wait early, as if its deadline had come.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Poke {
    Ends,
    Ignored,
}

/// Runs a wait `f` that sleeps on the latch while the client's hang-up is signalled, as lock
/// waits are (an error in `f` leaves the rest to the transaction's end).
pub fn watching_client<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: a GUC nest level opened and closed around the wait.
    unsafe {
        let level = pg_sys::NewGUCNestLevel();
        watch_client();
        let result = f();
        interrupt::disarm_socket();
        pg_sys::AtEOXact_GUC(true, level);
        result
    }
}

/// Takes `tag` in `mode` for this transaction, waiting no later than `deadline` (`None`: no
/// limit). Whether it got the lock.
pub fn acquire_until(tag: &pg_sys::LOCKTAG, mode: u32, deadline: Option<Timestamp>) -> bool {
    acquire_until_poked(tag, mode, deadline, Poke::Ignored)
}

/// `acquire_until`, ended early by a poke if `poke` says so (then `false`). A pokeable wait
/// needs a deadline.
pub fn acquire_until_poked(
    tag: &pg_sys::LOCKTAG,
    mode: u32,
    deadline: Option<Timestamp>,
    poke: Poke,
) -> bool {
    if keylock::acquire(tag, mode, false, false) {
        return true;
    }
    let Some(deadline) = deadline else {
        watching_client(|| {
            // SAFETY: inside the nest level `watching_client` opened.
            unsafe { set_guc(c"lock_timeout", "0") };
            keylock::acquire(tag, mode, false, true)
        });
        return true;
    };
    let left_ms = (deadline - now() + 999) / 1000;
    if left_ms <= 0 {
        return false;
    }
    if poke == Poke::Ends && !interrupt::open_pokeable() {
        return false;
    }
    // SAFETY: the subtransaction protocol of PL/pgSQL exception blocks: save the memory context
    // and resource owner, and restore both after releasing or rolling back the subtransaction.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let level = pg_sys::NewGUCNestLevel();
        set_guc(c"lock_timeout", &left_ms.min(i64::from(i32::MAX)).to_string());
        watch_client();
        // Any other error (cancel, statement_timeout, deadlock): end the subtransaction first,
        // as PL/pgSQL does, so the error aborts the caller's transaction cleanly.
        let fail = |error: pgrx::pg_sys::panic::CaughtError| -> bool {
            interrupt::close_pokeable();
            interrupt::disarm_socket();
            pg_sys::FlushErrorState();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
            error.rethrow()
        };
        let got = PgTryBuilder::new(|| {
            keylock::acquire(tag, mode, false, true);
            true
        })
        .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| false)
        // A poke arrives as a cancel; a genuine one goes on.
        .catch_when(PgSqlErrorCode::ERRCODE_QUERY_CANCELED, |error| {
            if interrupt::close_pokeable() { false } else { fail(error) }
        })
        .catch_others(fail)
        .execute();
        interrupt::close_pokeable();
        interrupt::disarm_socket();
        if got {
            pg_sys::AtEOXact_GUC(true, level);
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
        got
    }
}
