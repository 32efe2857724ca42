//! `dlock_acquire(..., wait)` and `dlock_try_acquire`: an attempt, then server-side waiting,
//! event-driven, in arrival order, with no polling. Without `shared_preload_libraries` the
//! queue is PostgreSQL's lock manager alone; preloaded, the head also publishes its request so
//! that whoever frees the key can grant it in their own transaction (`ops/handoff.rs`).
//!
//! A newcomer first tries the key: it is granted, reenters, or finds it busy — and it also finds
//! it busy when others already queue for it, so it never barges past them. A caller that may
//! wait then joins the key's FIFO queue (`wait/key_queue.rs`) and, once at its head, watches the
//! lease: it sleeps on its latch until the holder's `expires_at`, its own deadline, or a wake-up
//! from whoever frees the key (at their commit, `wait/wakeups.rs`), and re-reads the lease each
//! time, so renewals are respected and an expired lease changes hands within a millisecond or
//! two. Cancel, `statement_timeout`, postmaster death and the client hanging up end a wait at
//! once; the transaction abort takes the waiter out of the queue.

use crate::locks::{dropping, key as keylock};
use crate::ops::attempt;
use crate::ops::attempt::NotGranted;
use crate::ops::blocker::sleep_on;
use crate::ops::locking::{self, Locking};
use crate::pg::backend::{at_autocommit_top_level, now};
use crate::pg::latch::{ensure_client_connected, sleep_until};
use crate::pg::signals;
use crate::pg::version::WaitEvent;
use crate::stats::{self, WaitOutcome};
use crate::wait::{key_queue, requests};
use dlock_core::lease::{Blocker, Caller, Kind, Request};
use dlock_core::{DlockError, Micros, Timestamp, key::key_hash};

/// Acquires `key` as `request` asks, waiting up to `wait` (`None`: without limit). `Ok(None)`
/// when not granted in time.
pub fn acquire(
    key: &str,
    caller: &Caller,
    request: &Request,
    info: Option<&str>,
    wait: Option<Micros>,
) -> Result<Option<i64>, DlockError> {
    let hash = key_hash(key);
    let try_only = wait == Some(0);
    let deadline = wait.map(|w| now().saturating_add(w));
    // Others already queue for a hot key: an exclusive newcomer that holds no lease of it goes
    // to the back of the line (or gets NULL) without taking the key lock, which whoever is
    // releasing the key would wait for. (Its own lease is its own to change, so an unlocked look
    // at it is exact.)
    let behind_others =
        request.kind == Kind::Exclusive && key_queue::is_occupied(hash) && !attempt::holds_own(key, caller);
    // A try never blocks on a key another transaction is changing; a wait first waits for that
    // transaction, so that the holder's own reentry is recognised and never queues.
    let locking = Locking::of(key, hash, caller.owner, request);
    let keyed = !behind_others && locking.take(deadline, try_only);
    if keyed {
        match attempt::acquire(key, hash, caller, request, info, false) {
            Ok(fence) => return Ok(Some(granted(key, caller, &locking, fence))),
            Err(NotGranted::Refused(error)) => {
                locking.after_nothing_changed();
                return Err(error);
            }
            Err(NotGranted::Busy(_)) => locking.after_nothing_changed(),
        }
    }
    if try_only || !(keyed || behind_others) {
        return Ok(None);
    }
    suggest_preload_once();
    if dropping::under_way() {
        return Err(DlockError::Dropping);
    }
    // Counted as it ends: here when granted or timed out, as cancelled when an error ends it.
    let _counted = stats::wait_started(false, key, caller.owner, caller.role);
    let granted = wait_in_line(key, hash, caller, request, info, deadline);
    match granted {
        Ok(Some(_)) => stats::wait_ended(WaitOutcome::Granted),
        Ok(None) => stats::wait_ended(WaitOutcome::TimedOut),
        Err(_) => {}
    }
    granted
}

/// Joins the key's queue and waits at its head until granted (by a releaser, or itself) or
/// `deadline`.
fn wait_in_line(
    key: &str,
    hash: u64,
    caller: &Caller,
    request: &Request,
    info: Option<&str>,
    deadline: Option<Timestamp>,
) -> Result<Option<i64>, DlockError> {
    // Preloaded, a TTL request goes into the wait table before it joins the queue, so that
    // whoever frees the key once we are at the head can grant it to us in their own transaction
    // (`ops::handoff::hand_over`) — even if they free it before this backend has run again
    // since the lock manager made it the head. Only at the top level of an autocommit
    // statement: inside a transaction block or a subtransaction, our grant must be ours to
    // roll back, so we write it ourselves. (An election's info stays out of the table's
    // fixed-size slots: leaders grant themselves.)
    let published = request.kind != Kind::Leader
        && request.ttl.is_some_and(|ttl| {
            at_autocommit_top_level() && requests::publish(key, hash, caller.owner, caller.role, ttl, request)
        });
    let _abandon_on_error = published.then_some(requests::AbandonOnDrop);
    if !key_queue::join(hash, deadline) {
        return Ok(if published { withdraw(hash, None) } else { None });
    }
    let granted = head_loop(key, hash, caller, request, info, deadline, published);
    let granted = match granted {
        Ok(granted) if published => Ok(withdraw(hash, granted)),
        other => other,
    };
    // Granted: stay at the head until this transaction ends (its commit lets the queue lock go),
    // so the next in line wakes after the grant is durable, not in the middle of its WAL flush.
    // Not granted: leave at once.
    if !matches!(granted, Ok(Some(_))) {
        key_queue::leave(hash);
    }
    granted
}

/// The head watches the lease until it is granted (by itself, or handed over), or `deadline`.
fn head_loop(
    key: &str,
    hash: u64,
    caller: &Caller,
    request: &Request,
    info: Option<&str>,
    deadline: Option<Timestamp>,
    published: bool,
) -> Result<Option<i64>, DlockError> {
    loop {
        // A DROP EXTENSION dlock under way woke us: end the wait, letting our locks go.
        if dropping::under_way() {
            return Err(DlockError::Dropping);
        }
        // Never hand a lease to a client that hung up while it waited: it would sit unused
        // until its TTL ran out.
        ensure_client_connected();
        // A poke from here on ends the wait on a session-bound holder below (force release).
        signals::clear_poke();
        // Handed over: the grant is committed (a slot turns GRANTED only at the releaser's
        // commit), so no key lock is needed to see it. The releaser wakes us before it lets its
        // key lock go; not waiting for that saves a sleep in the lock manager per hand-off.
        if published && let requests::Answer::Granted(handed) = requests::answer() {
            return Ok(Some(handed.settle()));
        }
        // While another lease holds the key until a known expiry, sleep without touching the key
        // lock: whoever comes to release the key would wait for it.
        if let Some(expiry) = attempt::held_until(key, caller, request) {
            if deadline.is_some_and(|d| now() >= d) {
                return Ok(None);
            }
            sleep_until([deadline, Some(expiry)].into_iter().flatten().min(), WaitEvent::DlockLease.id());
            continue;
        }
        let locking = Locking::of(key, hash, caller.owner, request);
        if !locking.take(deadline, false) {
            return Ok(None);
        }
        // Holding the key lock, no hand-off is in flight: a grant to us has committed or not.
        if published && let requests::Answer::Granted(handed) = requests::answer() {
            locking.give_back();
            return Ok(Some(handed.settle()));
        }
        let blocker = match attempt::acquire(key, hash, caller, request, info, true) {
            Ok(fence) => return Ok(Some(granted(key, caller, &locking, fence))),
            Err(NotGranted::Refused(error)) => {
                locking.after_nothing_changed();
                return Err(error);
            }
            Err(NotGranted::Busy(blocker)) => {
                locking.after_nothing_changed();
                blocker
            }
        };
        let now = now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        sleep_on(blocker, now, deadline)?;
    }
}

/// A grant (or reentry) under `locking`: a shared lease taken with share-mode locks is noted, so
/// that its release can take them the same way.
fn granted(key: &str, caller: &Caller, locking: &Locking, fence: i64) -> i64 {
    if locking.shares() {
        locking::note_shared(key, caller.owner);
    }
    fence
}

/// The first wait of a session on a server that does not preload dlock says, once, what
/// preloading would add. (`CREATE EXTENSION` cannot: extension scripts run with notices muted.)
fn suggest_preload_once() {
    thread_local! {
        static SAID: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !requests::enabled() && !SAID.with(|s| s.replace(true)) {
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
        match requests::withdraw() {
            Ok(handed) => return granted.or_else(|| handed.map(requests::Handed::settle)),
            Err(requests::InFlight) => {
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
    let hash = key_hash(key);
    if !keylock::lock_key_until(hash, deadline) {
        return Err(Some(0));
    }
    match attempt::acquire(key, hash, caller, &Request::exclusive(ttl), None, false) {
        Ok(fence) => Ok(fence),
        Err(NotGranted::Busy(Blocker::Expiry(expiry))) => Err(Some((expiry - now()).max(0))),
        Err(NotGranted::Busy(Blocker::Session(_) | Blocker::Queue)) => Err(None),
        // An exclusive request meets no mode or size refusal: this is the shard map's.
        Err(NotGranted::Refused(error)) => crate::pg::report::raise(error, "dlock_try_acquire"),
    }
}
