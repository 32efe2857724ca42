//! dlock's heavyweight locks: PostgreSQL advisory locks in lock-tag spaces of our own.
//!
//! An advisory lock tag is (database, 32 bits, 32 bits, field4). SQL's `pg_advisory_*` only ever
//! use field4 = 1 or 2, so the values below can never collide with an application's advisory
//! locks. Three spaces:
//! - **key lock** (per 64-bit key hash, transaction-scoped, exclusive): serialises every read-
//!   decide-write on a key; held to commit by whoever changed the key. A hash collision only
//!   serialises two keys, it never merges their leases (the row is keyed by the full text).
//! - **session binding** (per fence, session-scoped): held by the session a session-bound lease
//!   belongs to; it vanishes when that session ends in any way, which is how others see it died.
//!   Fences are unique, so bindings never collide.
//! - **queue lock** (per key hash, transaction-scoped, exclusive): the wait queue of a key. The
//!   lock manager grants it in arrival order, so its holder is the head of the queue and the
//!   sessions blocked on it are the rest, in order (see `queue.rs`). `dlock_locks.waiters`
//!   counts its holder and waiters from `pg_locks`; a cancelled waiter is gone with its request.
//! - **watch** (per key hash, session-scoped, share): held by sessions that want a NOTIFY when
//!   the key may have become free (`watch.rs`); whoever frees a key probes it.

use crate::pending::Pending;
use pgrx::pg_sys;
use std::cell::RefCell;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const SPACE_KEY: u16 = 0x6b01;
const SPACE_BINDING: u16 = 0x6b02;
/// Also read by the `dlock_locks` query.
pub const SPACE_QUEUE: u16 = 0x6b03;
pub(crate) const SPACE_WATCH: u16 = 0x6b04;

/// Seed of the key hash; part of the on-disk/lock format, never change it within a major version.
const KEY_HASH_SEED: u64 = 0x646c_6f63_6b5f_7631; // "dlock_v1"

/// The 64-bit hash a key's locks are taken on.
pub fn key_hash(key: &str) -> u64 {
    xxh3_64_with_seed(key.as_bytes(), KEY_HASH_SEED)
}

pub(crate) fn tag(space: u16, id: u64) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set for every backend that can run SQL.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: (id >> 32) as u32,
        locktag_field3: id as u32,
        locktag_field4: space,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Runs `f` with the transaction's resource owner current. Our transaction-scoped locks all
/// belong to it, whether taken directly or while waiting inside an internal subtransaction
/// (`lockwait.rs`), so that one can be given back early from anywhere in the transaction.
fn as_transaction_owner<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: swaps a global pointer and restores it; an error unwinds to the transaction abort,
    // which resets it anyway.
    unsafe {
        let saved = pg_sys::CurrentResourceOwner;
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        let result = f();
        pg_sys::CurrentResourceOwner = saved;
        result
    }
}

pub(crate) fn acquire(tag: &pg_sys::LOCKTAG, mode: u32, session: bool, wait: bool) -> bool {
    // SAFETY: a valid tag of the user lock method; errors (deadlock, cancel) unwind as PG errors.
    let take = || unsafe { pg_sys::LockAcquire(tag, mode as pg_sys::LOCKMODE, session, !wait) };
    let result = if session { take() } else { as_transaction_owner(take) };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

pub(crate) fn release(tag: &pg_sys::LOCKTAG, mode: u32, session: bool) {
    // SAFETY: releases one hold taken by `acquire` with the same arguments.
    let give = || unsafe { pg_sys::LockRelease(tag, mode as pg_sys::LOCKMODE, session) };
    if session {
        give();
    } else {
        as_transaction_owner(give);
    }
}

thread_local! {
    /// Key lock holds (hash, mode) of this transaction, tagged by the subtransaction that took
    /// them: they belong to the top transaction, so a rolled-back savepoint gives back its own
    /// here (`sub_end`); what it changed under them is undone, so the keys are free again.
    static HELD: RefCell<Pending<(u64, u32)>> = const { RefCell::new(Pending::new()) };
}

fn held(hash: u64, mode: u32, got: bool) -> bool {
    if got {
        HELD.with(|h| h.borrow_mut().push((hash, mode)));
    }
    got
}

fn let_go(hash: u64, mode: u32) {
    release(&tag(SPACE_KEY, hash), mode, false);
    HELD.with(|h| h.borrow_mut().remove_last(|&held| held == (hash, mode)));
}

/// Takes the key lock if nobody else holds it (or we already do); never blocks.
pub fn try_lock_key(hash: u64) -> bool {
    held(hash, pg_sys::ExclusiveLock, acquire(&tag(SPACE_KEY, hash), pg_sys::ExclusiveLock, false, false))
}

/// Takes the key lock, waiting for the transaction that holds it (deadlock-checked, cancellable).
pub fn lock_key(hash: u64) {
    held(hash, pg_sys::ExclusiveLock, acquire(&tag(SPACE_KEY, hash), pg_sys::ExclusiveLock, false, true));
}

/// Takes the key lock, waiting no later than `deadline` (`None`: no limit); whether it got it.
pub fn lock_key_until(hash: u64, deadline: Option<crate::lease::Timestamp>) -> bool {
    let got = crate::lockwait::acquire_until(&tag(SPACE_KEY, hash), pg_sys::ExclusiveLock, deadline);
    held(hash, pg_sys::ExclusiveLock, got)
}

/// Takes the key lock in share mode: the key cannot change hands until this transaction ends.
pub fn share_key(hash: u64) {
    held(hash, pg_sys::ShareLock, acquire(&tag(SPACE_KEY, hash), pg_sys::ShareLock, false, true));
}

/// Gives back a share hold taken by `share_key` when there was nothing to protect.
pub fn unshare_key(hash: u64) {
    let_go(hash, pg_sys::ShareLock);
}

/// Gives back one hold of the key lock before commit; only when nothing was changed under it.
pub fn unlock_key(hash: u64) {
    let_go(hash, pg_sys::ExclusiveLock);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    if matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PARALLEL_ABORT
            | XACT_EVENT_PREPARE
    ) {
        HELD.with(|h| h.borrow_mut().take());
    }
}

/// A subtransaction ended (`subxact.rs`): a released one's holds are its parent's; a rolled-back
/// one gives back its own.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    if commit {
        HELD.with(|h| h.borrow_mut().sub_commit(sub, parent));
    } else {
        for (hash, mode) in HELD.with(|h| h.borrow_mut().sub_abort(sub)) {
            release(&tag(SPACE_KEY, hash), mode, false);
        }
    }
}

/// Registers the transaction callback; called once from `_PG_init`.
pub fn register_callbacks() {
    // SAFETY: a plain C callback with no argument, registered once per backend.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
    }
}

/// Binds the lease with this fence to our session.
pub fn bind(fence: i64) {
    if !acquire(&tag(SPACE_BINDING, fence as u64), pg_sys::ExclusiveLock, true, false) {
        pgrx::error!("dlock: fence {fence} is already bound to another session");
    }
}

/// Ends our session's binding of the lease with this fence (if it still has it).
pub fn unbind(fence: i64) {
    if binding_held(fence) {
        release(&tag(SPACE_BINDING, fence as u64), pg_sys::ExclusiveLock, true);
    }
}

/// Whether our session still holds the binding of this fence. `DISCARD ALL` and
/// `pg_advisory_unlock_all()` let every session-level advisory lock go, ours included: that
/// ends the session's session-bound leases as a disconnect would, and this is how the session
/// itself finds out.
pub fn binding_held(fence: i64) -> bool {
    // SAFETY: a lookup in this backend's lock table.
    unsafe {
        pg_sys::LockHeldByMe(&tag(SPACE_BINDING, fence as u64), pg_sys::ExclusiveLock as pg_sys::LOCKMODE)
    }
}

/// Waits until the session bound to `fence` lets the binding go (releases the lease or ends),
/// no later than `deadline`; whether it did. While it waits, the lock manager knows whom it
/// waits for, so a cycle of sessions waiting for each other's session-bound leases is found by
/// PostgreSQL's deadlock detector (ERROR 40P01 after `deadlock_timeout`). A force release,
/// which leaves the binding in place, pokes the waiter out early (`false`).
pub fn await_unbind(fence: i64, deadline: Option<crate::lease::Timestamp>) -> bool {
    let binding = tag(SPACE_BINDING, fence as u64);
    let got = crate::lockwait::acquire_until_poked(
        &binding,
        pg_sys::ShareLock,
        deadline,
        crate::lockwait::Poke::Ends,
    );
    if got {
        release(&binding, pg_sys::ShareLock, false);
    }
    got
}

/// Whether some *other* session still holds the binding of this fence. (Our own bindings never
/// conflict with us, so callers check those first, see `session::is_bound_here`.)
pub fn bound_elsewhere(fence: i64) -> bool {
    let probe = tag(SPACE_BINDING, fence as u64);
    // Share mode: concurrent probes do not disturb each other, the holder's exclusive blocks them.
    if acquire(&probe, pg_sys::ShareLock, false, false) {
        release(&probe, pg_sys::ShareLock, false);
        false
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::key_hash;

    #[test]
    fn key_hash_is_stable_and_byte_exact() {
        // The hash is part of the lock format: it must not change between builds.
        assert_eq!(key_hash("orders:42"), key_hash("orders:42"));
        assert_ne!(key_hash("orders:42"), key_hash("orders:43"));
        // Look-alike keys (NFC vs NFD "é") are distinct keys.
        assert_ne!(key_hash("caf\u{e9}"), key_hash("cafe\u{301}"));
    }
}
