//! Waiting for a heavyweight lock until a deadline. PostgreSQL's lock waits have no timeout
//! argument, only the `lock_timeout` setting, which ends the wait with an ERROR. So a bounded
//! wait runs in an internal subtransaction with `lock_timeout` set to the time left, and the
//! timeout error is caught and rolled back (as a PL/pgSQL exception block would) — this path
//! costs a subtransaction, but only for a caller that actually has to wait with a deadline.
//! Unbounded waits run with `lock_timeout` off, so a session's own `lock_timeout` cannot cut a
//! `wait => NULL` short; cancel and `statement_timeout` end every wait as usual. While waiting,
//! the client socket signals a hang-up (`pg/hangup.rs`), and a pokeable wait also ends early
//! when poked (`pg/signals.rs`).

use crate::locks::tags;
use crate::pg::backend::now;
use crate::pg::{guc, hangup, signals};
use dlock_core::Timestamp;
use pgrx::pg_sys;
use pgrx::{PgSqlErrorCode, PgTryBuilder};

/// Whether a poke (`signals::poke`) may end the wait early, as if its deadline had come.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Poke {
    Ends,
    Ignored,
}

/// Whether PostgreSQL's deadlock check runs for the wait (`wait/key_queue.rs` says when it need not).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum DeadlockCheck {
    On,
    Off,
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
    acquire_until_checked(tag, mode, deadline, poke, DeadlockCheck::On)
}

/// `acquire_until_poked`, with the deadlock check on or off for the wait.
pub fn acquire_until_checked(
    tag: &pg_sys::LOCKTAG,
    mode: u32,
    deadline: Option<Timestamp>,
    poke: Poke,
    check: DeadlockCheck,
) -> bool {
    if tags::acquire(tag, mode, false, false) {
        return true;
    }
    // Called inside the wait's own nest level (below), which the wait closes after it.
    let set_check = || {
        if check == DeadlockCheck::Off {
            // SAFETY: as said above.
            unsafe { guc::set_saved_superuser(c"deadlock_timeout", &i32::MAX.to_string()) };
        }
    };
    let Some(deadline) = deadline else {
        hangup::watching(|| {
            // SAFETY: inside the nest level `hangup::watching` opened.
            unsafe { guc::set_saved(c"lock_timeout", "0") };
            set_check();
            tags::acquire(tag, mode, false, true)
        });
        return true;
    };
    let left_ms = (deadline - now() + 999) / 1000;
    if left_ms <= 0 {
        return false;
    }
    if poke == Poke::Ends && !signals::open_pokeable() {
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
        guc::set_saved(c"lock_timeout", &left_ms.min(i64::from(i32::MAX)).to_string());
        set_check();
        hangup::watch();
        // Any other error (cancel, statement_timeout, deadlock): end the subtransaction first,
        // as PL/pgSQL does, so the error aborts the caller's transaction cleanly.
        let fail = |error: pgrx::pg_sys::panic::CaughtError| -> bool {
            signals::close_pokeable();
            signals::disarm_socket();
            pg_sys::FlushErrorState();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
            error.rethrow()
        };
        let got = PgTryBuilder::new(|| {
            tags::acquire(tag, mode, false, true);
            true
        })
        .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| false)
        // A poke arrives as a cancel; a genuine one goes on.
        .catch_when(PgSqlErrorCode::ERRCODE_QUERY_CANCELED, |error| {
            if signals::close_pokeable() { false } else { fail(error) }
        })
        .catch_others(fail)
        .execute();
        signals::close_pokeable();
        signals::disarm_socket();
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
