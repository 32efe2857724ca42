//! Watches: how one connection waits for many keys. A session that calls `dlock_watch(key)`
//! LISTENs on the key's channel (`dlock_` and the key hash in hex) and holds a session-scoped
//! share lock on the key's watch tag. Whoever frees a key (release, release_all, force release,
//! a shortening renew, a holder session ending) probes that tag when its transaction is about
//! to commit and, only if someone watches, queues a NOTIFY on the channel (no payload: the
//! key's name stays private), which PostgreSQL delivers after the commit is visible and drops
//! on rollback. Keys nobody watches cost one lock probe.
//!
//! No lost wake-ups, given the order a watcher follows: watch first, then try the key *waiting
//! for its key lock* (`dlock_try_acquire`). A release that committed before the try took the
//! key lock is seen by the try; a release after it probes at its pre-commit, still holding the
//! key lock, hence after the watch was registered, and notifies.

use crate::locks::tags::{self, Space, tag};
use crate::pg::ffi::{Async_Listen, Async_Notify, Async_Unlisten};
use crate::pg::pending::Pending;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::ffi::CString;

/// The NOTIFY channel of the key with this hash: a plain identifier (`LISTEN dlock_00ff…`).
pub fn channel(hash: u64) -> String {
    format!("dlock_{hash:016x}")
}

fn c_channel(hash: u64) -> CString {
    CString::new(channel(hash)).expect("no NUL in a hex name")
}

/// A watch change of the open transaction, settled when it ends: like the LISTEN or UNLISTEN
/// that goes with it, a watch takes effect at commit and is undone by a rollback.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    /// The watch lock was taken in this transaction: let it go again on rollback.
    Watch,
    /// Let the watch lock go at commit.
    Unwatch,
}

thread_local! {
    /// Watch changes of the open transaction: (key hash, change), in order.
    static PENDING: RefCell<Pending<(u64, Change)>> = const { RefCell::new(Pending::new()) };
}

fn holds_watch(hash: u64) -> bool {
    tags::held_by_me(&tag(Space::Watch, hash), pg_sys::ShareLock)
}

fn push(hash: u64, change: Change) {
    PENDING.with(|p| p.borrow_mut().push((hash, change)));
}

fn unwatch_pending(hash: u64) -> bool {
    PENDING.with(|p| p.borrow().iter().any(|&x| x == (hash, Change::Unwatch)))
}

/// Registers this session as watching the key (idempotent) and LISTENs on its channel, both
/// from this transaction's commit on.
pub fn watch(hash: u64) {
    let channel = c_channel(hash);
    // SAFETY: LISTEN takes effect at commit, like the SQL command.
    unsafe { Async_Listen(channel.as_ptr()) };
    let cancelled_unwatch = unwatch_pending(hash);
    if cancelled_unwatch {
        PENDING.with(|p| p.borrow_mut().retain(|&x| x != (hash, Change::Unwatch)));
    }
    if !cancelled_unwatch && !holds_watch(hash) {
        // The lock at once, so that releases from now on see the watch (see the module docs).
        tags::acquire(&tag(Space::Watch, hash), pg_sys::ShareLock, true, true);
        push(hash, Change::Watch);
    }
}

/// Ends this session's watch of the key (and its LISTEN) at commit; whether it had one.
pub fn unwatch(hash: u64) -> bool {
    if !holds_watch(hash) || unwatch_pending(hash) {
        return false;
    }
    let channel = c_channel(hash);
    // SAFETY: UNLISTEN of a channel, effective at commit.
    unsafe { Async_Unlisten(channel.as_ptr()) };
    push(hash, Change::Unwatch);
    true
}

fn release_watch(hash: u64) {
    if holds_watch(hash) {
        tags::release(&tag(Space::Watch, hash), pg_sys::ShareLock, true);
    }
}

/// Applies ended changes: an unwatch that committed lets the lock go, and so does a watch
/// that rolled back.
fn settle(changes: Vec<(u64, Change)>, commit: bool) {
    for (hash, change) in changes {
        if (change == Change::Unwatch) == commit {
            release_watch(hash);
        }
    }
}

/// The transaction ended: its watch changes take effect (commit) or are undone.
pub fn at_end(commit: bool) {
    settle(PENDING.with(|p| p.borrow_mut().take()), commit);
}

/// A subtransaction ended (`hooks/subxact.rs`): a rolled-back one's watch changes are undone.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    if commit {
        PENDING.with(|p| p.borrow_mut().sub_commit(sub, parent));
    } else {
        settle(PENDING.with(|p| p.borrow_mut().sub_abort(sub)), false);
    }
}

/// Whether any session (this one included) watches the key. Needs an open transaction.
pub fn is_watched(hash: u64) -> bool {
    let watch = tag(Space::Watch, hash);
    // Nobody holds the share lock iff the exclusive probe succeeds at once.
    holds_watch(hash) || tags::held_elsewhere(&watch, pg_sys::ExclusiveLock)
}

/// Queues a NOTIFY on the key's channel in the open transaction (sent at commit, deduplicated).
pub fn notify(hash: u64) {
    let channel = c_channel(hash);
    crate::stats::count_at_commit(crate::stats::Counter::Notifications);
    // SAFETY: both strings are NUL-terminated and copied by Async_Notify.
    unsafe { Async_Notify(channel.as_ptr(), c"".as_ptr()) };
}

/// Notifies the watchers of every watched key among `hashes`.
pub fn notify_watched(hashes: impl IntoIterator<Item = u64>) {
    for hash in hashes {
        if is_watched(hash) {
            notify(hash);
        }
    }
}
