//! Server-side waiting for `dlock_acquire(..., wait)`: event-driven, in arrival order, with no
//! polling and no shared memory of our own (so no `shared_preload_libraries` and no restart).
//!
//! A newcomer first tries the key: it is granted, reenters, or finds it busy — and it also finds
//! it busy when others already queue for it, so it never barges past them. A caller that may
//! wait then joins the key's FIFO queue (`queue.rs`) and, once at its head, watches the lease:
//! it sleeps on its latch until the holder's `expires_at`, its own deadline, or a wake-up from
//! whoever frees the key (at their commit, `handoff.rs`), and re-reads the lease each time, so
//! renewals are respected and an expired lease changes hands within a millisecond or two.
//! Cancel, `statement_timeout`, postmaster death and the client hanging up end a wait at once;
//! the transaction abort takes the waiter out of the queue.

use crate::args::Micros;
use crate::current::now;
use crate::error::DlockError;
use crate::interrupt;
use crate::keylock;
use crate::lease::{Blocker, Caller, Timestamp};
use crate::ops;
use crate::queue;
use crate::session;
use crate::waitslot;
use pgrx::pg_sys;

/// How much longer than `deadlock_timeout` a head waits on a session-bound holder in one go:
/// enough for PostgreSQL's deadlock check (run at `deadlock_timeout`) to come first. A force
/// release, which leaves the holder's binding in place, pokes the head out of the wait at once;
/// the slice ending is the backstop.
const SLICE_MARGIN_US: i64 = 100_000;

/// Acquires `key`, waiting up to `wait` (`None`: without limit). `None` when not granted.
pub fn acquire(key: &str, caller: &Caller, ttl: Option<Micros>, wait: Option<Micros>) -> Option<i64> {
    let hash = keylock::key_hash(key);
    let try_only = wait == Some(0);
    let deadline = wait.map(|w| now().saturating_add(w));
    // A try never blocks on a key another transaction is changing; a wait first waits for that
    // transaction, so that the holder's own reentry is recognised and never queues.
    let keyed = if try_only { keylock::try_lock_key(hash) } else { keylock::lock_key_until(hash, deadline) };
    if keyed && let Ok(fence) = ops::try_acquire(key, hash, caller, ttl, false) {
        return Some(fence);
    }
    if try_only || !keyed {
        return None;
    }
    suggest_preload_once();
    if !queue::join(hash, deadline) {
        return None;
    }
    // At the head. Preloaded, a TTL request goes into the wait table, so that whoever frees the
    // key can grant it to us in their own transaction (`handoff::hand_over`) — only at the top
    // level of an autocommit statement: inside a transaction block or a subtransaction, our
    // grant must be ours to roll back, so we write it ourselves.
    let published =
        ttl.is_some_and(|ttl| at_top_level() && waitslot::publish(key, hash, caller.owner, caller.role, ttl));
    let granted = loop {
        // Never hand a lease to a client that hung up while it waited: it would sit unused
        // until its TTL ran out.
        ensure_client_connected();
        // A poke from here on ends the wait on a session-bound holder below (force release).
        interrupt::clear_poke();
        if !keylock::lock_key_until(hash, deadline) {
            break None;
        }
        // Holding the key lock, no hand-off is in flight: a grant to us has committed or not.
        if published && let waitslot::Answer::Granted(handed) = waitslot::answer() {
            keylock::unlock_key(hash);
            break Some(handed.settle());
        }
        let blocker = match ops::try_acquire(key, hash, caller, ttl, true) {
            Ok(fence) => break Some(fence),
            Err(blocker) => blocker,
        };
        let now = now();
        if deadline.is_some_and(|d| now >= d) {
            break None;
        }
        match blocker {
            Blocker::Expiry(expiry) => sleep_until([deadline, Some(expiry)].into_iter().flatten().min()),
            // Held by this very session under another owner string: only a force release can
            // end that, so wait for its wake-up; without a deadline that is a deadlock.
            Blocker::Session(fence) if session::is_bound_here(fence) => match deadline {
                Some(_) => sleep_until(deadline),
                None => DlockError::SelfDeadlock.raise("dlock_acquire"),
            },
            // Wait in the lock manager for the holder's session (deadlock-checked), in slices a
            // little longer than deadlock_timeout, until a force release pokes us.
            Blocker::Session(fence) => {
                // SAFETY: reads a setting.
                let slice_us = i64::from(unsafe { pg_sys::DeadlockTimeout }) * 1000 + SLICE_MARGIN_US;
                let slice_end = now.saturating_add(slice_us);
                keylock::await_unbind(fence, Some(deadline.map_or(slice_end, |d| d.min(slice_end))));
            }
            // Only a newcomer sees a queue ahead; the head never does.
            Blocker::Queue => sleep_until(deadline),
        }
    };
    let granted = if published { withdraw(hash, granted) } else { granted };
    // Granted: stay at the head until this transaction ends (its commit lets the queue lock go),
    // so the next in line wakes after the grant is durable, not in the middle of its WAL flush.
    // Not granted: leave at once.
    if granted.is_none() {
        queue::leave(hash);
    }
    granted
}

/// Whether this call runs in a transaction of its own statement, not in a subtransaction.
fn at_top_level() -> bool {
    // SAFETY: reads transaction state.
    unsafe { !pg_sys::IsTransactionBlock() && pg_sys::GetCurrentTransactionNestLevel() == 1 }
}

/// The first wait of a session on a server that does not preload dlock says, once, what
/// preloading would add. (`CREATE EXTENSION` cannot: extension scripts run with notices muted.)
fn suggest_preload_once() {
    thread_local! {
        static SAID: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !waitslot::enabled() && !SAID.with(|s| s.replace(true)) {
        pgrx::pg_sys::panic::ErrorReport::new(
            pgrx::PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            "dlock: waiting without shared_preload_libraries = 'dlock' (said once per session)",
            "dlock_acquire",
        )
        .set_hint(
            "Preloaded (then a restart), a freed key is handed to its waiter in the releaser's \
             transaction, sparing the waiter a WAL flush; everything works without it.",
        )
        .report(pgrx::PgLogLevel::NOTICE);
    }
}

/// Takes our request out of the wait table once the wait is over. A hand-off that committed
/// meanwhile wins over a deadline (the lease is ours, durably); one still in flight is waited
/// for, as any transaction changing the key is.
fn withdraw(hash: u64, granted: Option<i64>) -> Option<i64> {
    loop {
        match waitslot::withdraw() {
            Ok(handed) => return granted.or_else(|| handed.map(waitslot::Handed::settle)),
            Err(waitslot::InFlight) => {
                keylock::lock_key(hash);
                keylock::unlock_key(hash);
            }
        }
    }
}

/// One attempt that never queues, for clients that wait elsewhere (on a `dlock_watch`): it
/// waits only for a transaction that is changing the key to end, until `deadline`, and then
/// grants or says what the key waits for: `Err(Some(t))` when the blocking lease expires in
/// `t` µs by itself, `Err(Some(0))` when the key stayed locked by another transaction until the
/// deadline, `Err(None)` when only a release or the holder's session ending frees it (watchers
/// are notified then).
pub fn try_once(
    key: &str,
    caller: &Caller,
    ttl: Option<Micros>,
    deadline: Option<Timestamp>,
) -> Result<i64, Option<Micros>> {
    let hash = keylock::key_hash(key);
    if !keylock::lock_key_until(hash, deadline) {
        return Err(Some(0));
    }
    match ops::try_acquire(key, hash, caller, ttl, false) {
        Ok(fence) => Ok(fence),
        Err(Blocker::Expiry(expiry)) => Err(Some((expiry - now()).max(0))),
        Err(Blocker::Session(_) | Blocker::Queue) => Err(None),
    }
}

/// The client's socket, if this backend serves a client and can see it close.
fn client_socket() -> Option<pg_sys::pgsocket> {
    // SAFETY: asks whether the platform's wait events report a closed socket.
    interrupt::client_socket().filter(|_| unsafe { pg_sys::WaitEventSetCanReportClosed() })
}

/// Waits for the latch, the client hanging up, or `timeout_ms` (`None`: no limit); then serves
/// interrupts. A hung-up client ends the backend as `client_connection_check_interval` would
/// (FATAL "connection to client lost").
fn wait_for_events(latch: bool, timeout_ms: Option<i64>) {
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
            pg_sys::PG_WAIT_EXTENSION,
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

/// Sleeps on the latch until `until` (`None`: until woken); a client that hangs up ends the
/// wait at once rather than leaving its backend waiting for a lease nobody will use.
fn sleep_until(until: Option<Timestamp>) {
    wait_for_events(true, until.map(|u| ((u - now()).max(0) + 999) / 1000));
}

/// Ends the backend now if its client hung up (a zero-timeout look at the socket).
fn ensure_client_connected() {
    if client_socket().is_some() {
        wait_for_events(false, Some(0));
    }
}
