//! dlock's heavyweight locks are PostgreSQL advisory locks in lock-tag spaces of its own.
//!
//! An advisory lock tag is (database, 32 bits, 32 bits, field4). SQL's `pg_advisory_*` only ever
//! use field4 = 1 or 2, so the spaces below can never collide with an application's advisory
//! locks. The 64 bits are a key's hash (`dlock_core::key`) or a fence.

use pgrx::pg_sys;

/// The lock spaces, each with its own field4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Space {
    /// Per key hash, transaction-scoped, exclusive (or share, for a fencing check): serialises
    /// every read-decide-write on a key (`key.rs`).
    Key = 0x6b01,
    /// Per fence, session-scoped: held by the session a session-bound lease belongs to
    /// (`binding.rs`).
    Binding = 0x6b02,
    /// Per key hash, transaction-scoped, exclusive: the FIFO wait queue of a key
    /// (`wait/key_queue.rs`); `dlock_locks.waiters` counts its holder and waiters.
    Queue = 0x6b03,
    /// Per key hash, session-scoped, share: sessions that want a NOTIFY when the key may have
    /// become free (`watchers.rs`).
    Watch = 0x6b04,
    /// One per database, transaction-scoped, exclusive: held by a `DROP EXTENSION dlock` under
    /// way, which ends every wait (`dropping.rs`).
    Dropping = 0x6b05,
    /// Per key hash, transaction-scoped, share: sessions in `dlock_wait_free`, woken together
    /// by whoever frees the key (`wait/free_waiters.rs`).
    FreeWait = 0x6b06,
    /// One per database (id 0), session-scoped, exclusive: held by the background worker that
    /// announces elections' leaders whose lease expired (`elections/worker.rs`).
    ElectionWatch = 0x6b07,
    /// Per key hash, transaction-scoped, exclusive: taken by a grant about to sweep a row of that
    /// key before it takes the key lock, and held with it until it commits (`key.rs`): a try
    /// that finds the key lock taken waits for a sweep, which changes no lease, and answers at
    /// once for anything else.
    Sweep = 0x6b08,
}

/// The lock tag of `id` (a key hash or a fence) in `space`, in this database.
pub fn tag(space: Space, id: u64) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: crate::pg::backend::database().to_u32(),
        locktag_field2: (id >> 32) as u32,
        locktag_field3: id as u32,
        locktag_field4: space as u16,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Runs `f` with the transaction's resource owner current. Our transaction-scoped locks all
/// belong to it, whether taken directly or while waiting inside an internal subtransaction
/// (`deadline.rs`), so that one can be given back early from anywhere in the transaction.
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

/// Takes `tag` in `mode`, for the session or the transaction; waits for it if `wait` (a wait
/// that is deadlock-checked and cancellable). Whether it got it.
pub fn acquire(tag: &pg_sys::LOCKTAG, mode: u32, session: bool, wait: bool) -> bool {
    // SAFETY: a valid tag of the user lock method; errors (deadlock, cancel) unwind as PG errors.
    let take = || unsafe { pg_sys::LockAcquire(tag, mode as pg_sys::LOCKMODE, session, !wait) };
    let result = if session { take() } else { as_transaction_owner(take) };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Gives back one hold taken by [`acquire`] with the same arguments.
pub fn release(tag: &pg_sys::LOCKTAG, mode: u32, session: bool) {
    // SAFETY: releases one hold taken by `acquire` with the same arguments.
    let give = || unsafe { pg_sys::LockRelease(tag, mode as pg_sys::LOCKMODE, session) };
    if session {
        give();
    } else {
        as_transaction_owner(give);
    }
}

/// Whether this backend holds `tag` in `mode`.
pub fn held_by_me(tag: &pg_sys::LOCKTAG, mode: u32) -> bool {
    crate::pg::version::lock_held_by_me(tag, mode)
}

/// Whether some other session holds `tag` in a mode that conflicts with `probe` (which must
/// not conflict with itself, so that concurrent probes never disturb each other).
pub fn held_elsewhere(tag: &pg_sys::LOCKTAG, probe: u32) -> bool {
    if acquire(tag, probe, false, false) {
        release(tag, probe, false);
        false
    } else {
        true
    }
}
