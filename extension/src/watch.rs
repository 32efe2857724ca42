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

use crate::keylock::{self, SPACE_WATCH, tag};
use pgrx::pg_sys;
use std::ffi::{CString, c_char};

// commands/async.h, which pgrx does not bind.
unsafe extern "C-unwind" {
    fn Async_Listen(channel: *const c_char);
    fn Async_Unlisten(channel: *const c_char);
    fn Async_Notify(channel: *const c_char, payload: *const c_char);
}

/// The NOTIFY channel of the key with this hash: a plain identifier (`LISTEN dlock_00ff…`).
pub fn channel(hash: u64) -> String {
    format!("dlock_{hash:016x}")
}

fn c_channel(hash: u64) -> CString {
    CString::new(channel(hash)).expect("no NUL in a hex name")
}

/// Registers this session as watching the key (idempotent) and LISTENs on its channel.
pub fn watch(hash: u64) {
    let watch = tag(SPACE_WATCH, hash);
    let channel = c_channel(hash);
    // SAFETY: LISTEN takes effect at commit, like the SQL command; the lock calls are the
    // lock manager's own, on a tag of ours.
    unsafe {
        Async_Listen(channel.as_ptr());
        if !pg_sys::LockHeldByMe(&watch, pg_sys::ShareLock as pg_sys::LOCKMODE) {
            keylock::acquire(&watch, pg_sys::ShareLock, true, true);
        }
    }
}

/// Ends this session's watch of the key (and its LISTEN); whether it had one.
pub fn unwatch(hash: u64) -> bool {
    let watch = tag(SPACE_WATCH, hash);
    let channel = c_channel(hash);
    // SAFETY: as in `watch`.
    let held = unsafe { pg_sys::LockHeldByMe(&watch, pg_sys::ShareLock as pg_sys::LOCKMODE) };
    if held {
        keylock::release(&watch, pg_sys::ShareLock, true);
        // SAFETY: UNLISTEN of a channel, effective at commit.
        unsafe { Async_Unlisten(channel.as_ptr()) };
    }
    held
}

/// Whether any session (this one included) watches the key. Needs an open transaction.
pub fn is_watched(hash: u64) -> bool {
    let watch = tag(SPACE_WATCH, hash);
    // SAFETY: as in `watch`.
    if unsafe { pg_sys::LockHeldByMe(&watch, pg_sys::ShareLock as pg_sys::LOCKMODE) } {
        return true;
    }
    // Nobody holds the share lock iff the exclusive probe succeeds at once.
    if keylock::acquire(&watch, pg_sys::ExclusiveLock, false, false) {
        keylock::release(&watch, pg_sys::ExclusiveLock, false);
        false
    } else {
        true
    }
}

/// Queues a NOTIFY on the key's channel in the open transaction (sent at commit, deduplicated).
pub fn notify(hash: u64) {
    let channel = c_channel(hash);
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
