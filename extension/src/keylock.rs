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
//! - **waiter mark** (per key hash, transaction-scoped, shared): one per waiting session, so
//!   `dlock_locks.waiters` can count them from `pg_locks`; gone with the wait, even if cancelled.

use pgrx::pg_sys;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const SPACE_KEY: u16 = 0x6b01;
const SPACE_BINDING: u16 = 0x6b02;
/// Also read by the `dlock_locks` query.
pub const SPACE_WAITER: u16 = 0x6b03;

/// Seed of the key hash; part of the on-disk/lock format, never change it within a major version.
const KEY_HASH_SEED: u64 = 0x646c_6f63_6b5f_7631; // "dlock_v1"

/// The 64-bit hash a key's locks are taken on.
pub fn key_hash(key: &str) -> u64 {
    xxh3_64_with_seed(key.as_bytes(), KEY_HASH_SEED)
}

fn tag(space: u16, id: u64) -> pg_sys::LOCKTAG {
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

fn acquire(tag: &pg_sys::LOCKTAG, mode: u32, session: bool, wait: bool) -> bool {
    // SAFETY: a valid tag of the user lock method; errors (deadlock, cancel) unwind as PG errors.
    let result = unsafe { pg_sys::LockAcquire(tag, mode as pg_sys::LOCKMODE, session, !wait) };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

fn release(tag: &pg_sys::LOCKTAG, mode: u32, session: bool) {
    // SAFETY: releases one hold taken by `acquire` with the same arguments.
    unsafe {
        pg_sys::LockRelease(tag, mode as pg_sys::LOCKMODE, session);
    }
}

/// Takes the key lock if nobody else holds it (or we already do); never blocks.
pub fn try_lock_key(hash: u64) -> bool {
    acquire(&tag(SPACE_KEY, hash), pg_sys::ExclusiveLock, false, false)
}

/// Takes the key lock, waiting for the transaction that holds it (deadlock-checked, cancellable).
pub fn lock_key(hash: u64) {
    acquire(&tag(SPACE_KEY, hash), pg_sys::ExclusiveLock, false, true);
}

/// Takes the key lock in share mode: the key cannot change hands until this transaction ends.
pub fn share_key(hash: u64) {
    acquire(&tag(SPACE_KEY, hash), pg_sys::ShareLock, false, true);
}

/// Gives back a share hold taken by `share_key` when there was nothing to protect.
pub fn unshare_key(hash: u64) {
    release(&tag(SPACE_KEY, hash), pg_sys::ShareLock, false);
}

/// Gives back one hold of the key lock before commit; only when nothing was changed under it.
pub fn unlock_key(hash: u64) {
    release(&tag(SPACE_KEY, hash), pg_sys::ExclusiveLock, false);
}

/// Binds the lease with this fence to our session.
pub fn bind(fence: i64) {
    if !acquire(&tag(SPACE_BINDING, fence as u64), pg_sys::ExclusiveLock, true, false) {
        pgrx::error!("dlock: fence {fence} is already bound to another session");
    }
}

/// Ends our session's binding of the lease with this fence.
pub fn unbind(fence: i64) {
    release(&tag(SPACE_BINDING, fence as u64), pg_sys::ExclusiveLock, true);
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

/// Marks this session as waiting on the key (until `leave_waiters` or the transaction ends).
pub fn enter_waiters(hash: u64) {
    acquire(&tag(SPACE_WAITER, hash), pg_sys::AccessShareLock, false, false);
}

/// Whether any other session waits on the key (holds a waiting mark). Never blocks.
pub fn has_waiters(hash: u64) -> bool {
    let probe = tag(SPACE_WAITER, hash);
    // AccessExclusive: the only mode that conflicts with the marks' AccessShare.
    if acquire(&probe, pg_sys::AccessExclusiveLock, false, false) {
        release(&probe, pg_sys::AccessExclusiveLock, false);
        false
    } else {
        true
    }
}

/// Removes the waiting mark.
pub fn leave_waiters(hash: u64) {
    release(&tag(SPACE_WAITER, hash), pg_sys::AccessShareLock, false);
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
