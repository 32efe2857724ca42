//! The operations behind the SQL functions, on checked arguments: take the key lock, read the
//! row, let `lease.rs` decide, write. A key lock is given back at once when nothing changed, so
//! only a transaction that *changed* a key keeps it busy for others until it ends.

use crate::args::Micros;
use crate::current::{classify, is_live, my_pid, now};
use crate::durability;
use crate::error::DlockError;
use crate::handoff;
use crate::keylock::{self, key_hash};
use crate::lease::{self, Acquire, Blocker, Caller, Current, INFINITY, Release, Renew, Timestamp};
use crate::queue;
use crate::role;
use crate::session;
use crate::spi;
use crate::store;
use crate::sweep;

/// One acquire attempt while holding the key lock: `Ok(fence)` when granted, otherwise what
/// the key waits for, with the key lock given back.
/// `waiting`: the caller already waits for this key (it is one of the queue, so others waiting
/// do not stop it). A newcomer first tries the one-statement grant when nobody waits (the key
/// is usually free then); waiters re-trying a busy key read first.
pub fn try_acquire(
    key: &str,
    hash: u64,
    caller: &Caller,
    ttl: Option<Micros>,
    waiting: bool,
) -> Result<i64, Blocker> {
    spi::connect(|spi| {
        let now = now();
        let new = store::NewLease {
            key,
            owner: caller.owner,
            role: caller.role,
            acquired_at: now,
            expires_at: lease::expiry(now, ttl),
            holder_pid: my_pid(),
        };
        let queue_ahead = !waiting && queue::is_occupied(hash);
        if !waiting
            && !queue_ahead
            && let Some(fence) = store::try_grant(spi, &new)
        {
            granted(spi, fence, hash, ttl, now);
            return Ok(fence);
        }
        let row = store::read(spi, key);
        match lease::acquire(classify(row.as_ref(), now), caller, ttl, now, queue_ahead) {
            Acquire::Grant { .. } => {
                let fence = store::grant(spi, &new);
                granted(spi, fence, hash, ttl, now);
                Ok(fence)
            }
            Acquire::Reenter { fence, expires_at, bind_session } => {
                let holder = row.as_ref().map_or(my_pid(), |l| l.holder_pid);
                store::reenter(spi, key, expires_at, if bind_session { my_pid() } else { holder });
                if bind_session {
                    session::bind(fence, hash);
                }
                Ok(fence)
            }
            Acquire::Busy(blocker) => {
                keylock::unlock_key(hash);
                Err(blocker)
            }
        }
    })
}

/// After a new lease was written: bind it to the session if it is session-bound, and do our
/// share of keeping the table small.
fn granted(spi: &spi::Spi, fence: i64, hash: u64, ttl: Option<Micros>, now: Timestamp) {
    if ttl.is_none() {
        session::bind(fence, hash);
    }
    sweep::after_grant(spi, now);
}

/// The caller of renew/release-like calls, admin standing included.
fn caller(owner: &str) -> Caller<'_> {
    let role = role::caller();
    Caller { role, owner, admin: role::is_admin(role) }
}

/// `dlock_renew`: the new `expires_at`, `INFINITY` for a session-bound lease, `None` if not held.
pub fn renew(key: &str, owner: &str, ttl: Micros) -> Result<Option<Timestamp>, DlockError> {
    let caller = caller(owner);
    let hash = key_hash(key);
    keylock::lock_key(hash);
    spi::connect(|spi| {
        let now = now();
        let row = store::read(spi, key);
        match lease::renew(classify(row.as_ref(), now), &caller, ttl, now) {
            Renew::Extend(expires_at) => {
                store::set_expiry(spi, key, expires_at);
                // A shorter lease: the head of the queue sleeps until the old expiry; wake it.
                if row.as_ref().is_some_and(|l| expires_at < l.expires_at) {
                    handoff::wake_at_commit(hash);
                }
                Ok(Some(expires_at))
            }
            unchanged => {
                keylock::unlock_key(hash);
                match unchanged {
                    Renew::SessionBound => Ok(Some(INFINITY)),
                    Renew::Forbidden => Err(DlockError::ForeignRole { action: "renew" }),
                    _ => Ok(None),
                }
            }
        }
    })
}

/// `dlock_release`: whether the caller held the lease (one hold given back).
pub fn release(key: &str, owner: &str) -> Result<bool, DlockError> {
    let role = role::caller();
    let hash = key_hash(key);
    keylock::lock_key(hash);
    spi::connect(|spi| {
        let now = now();
        let eligible = durability::release_eligible();
        if store::release_last_hold(spi, key, owner, role, now) {
            handoff::wake_at_commit(hash);
            durability::released_if(eligible);
            handoff::hand_over(spi, key, hash);
            return Ok(true);
        }
        // Off the common path: admin standing (catalog lookups) only matters from here on.
        let caller = caller(owner);
        let row = store::read(spi, key);
        match lease::release(classify(row.as_ref(), now), &caller) {
            Release::Decrement => {
                store::decrement(spi, key);
                durability::released_if(eligible);
                Ok(true)
            }
            Release::Free => {
                free(spi, key, row.as_ref().map(|l| l.fence));
                durability::released_if(eligible);
                handoff::hand_over(spi, key, hash);
                Ok(true)
            }
            Release::NotHeld => {
                keylock::unlock_key(hash);
                Ok(false)
            }
            Release::Forbidden => Err(DlockError::ForeignRole { action: "release" }),
        }
    })
}

/// `dlock_release_all`: frees every live lease of `owner` (of the caller's role unless admin).
pub fn release_all(owner: &str) -> i32 {
    let caller = caller(owner);
    let role_filter = (!caller.admin).then_some(caller.role);
    spi::connect(|spi| {
        let eligible = durability::release_eligible();
        let mut freed = Vec::new();
        // Key order: two release_all calls lock their keys in the same order.
        for key in store::keys_of_owner(spi, owner, role_filter) {
            let hash = key_hash(&key);
            keylock::lock_key(hash);
            let now = now();
            match store::read(spi, &key) {
                Some(l)
                    if l.owner == owner && role_filter.is_none_or(|r| r == l.role) && is_live(&l, now) =>
                {
                    free(spi, &key, Some(l.fence));
                    freed.push(key);
                }
                _ => keylock::unlock_key(hash),
            }
        }
        if !freed.is_empty() {
            durability::released_if(eligible);
        }
        for key in &freed {
            handoff::hand_over(spi, key, key_hash(key));
        }
        freed.len() as i32
    })
}

/// `dlock_holds`: whether a live lease on `key` carries `fence`. When it does, the key stays
/// share-locked until the caller's transaction ends, so it cannot change hands before a fenced
/// write in the same transaction commits. That pin would delay the holder's renew and release
/// and the key's expiry, so it is only for the lease's own role and for roles trusted to fence
/// (`role::may_fence_others`): anyone else asking about another role's live lease gets 42501,
/// and pins nothing.
pub fn holds(key: &str, fence: i64) -> Result<bool, DlockError> {
    let hash = key_hash(key);
    let caller = role::caller();
    let carries = |lease: &lease::Lease| lease.fence == fence && is_live(lease, now());
    // A first look, without a lock: a lease that does not carry the fence needs no pin.
    let Some(lease) = spi::connect(|spi| store::read(spi, key)).filter(carries) else {
        return Ok(false);
    };
    if lease.role != caller && !role::may_fence_others(caller) {
        return Err(DlockError::NotFencer);
    }
    keylock::share_key(hash);
    let held = spi::connect(|spi| store::read(spi, key).is_some_and(|l| carries(&l)));
    if !held {
        keylock::unshare_key(hash);
    }
    Ok(held)
}

/// `dlock_force_release`: frees the key whoever holds it; admins only.
pub fn force_release(key: &str) -> Result<bool, DlockError> {
    let role = role::caller();
    if !role::is_admin(role) {
        return Err(DlockError::NotAdmin { function: "dlock_force_release" });
    }
    let hash = key_hash(key);
    keylock::lock_key(hash);
    spi::connect(|spi| {
        let now = now();
        let row = store::read(spi, key);
        match classify(row.as_ref(), now) {
            Current::Live(l) => {
                pgrx::log!(
                    "dlock: key {key:?} force-released by {} (owner {:?}, fence {}, role {})",
                    role::name(role),
                    l.owner,
                    l.fence,
                    role::name(l.role)
                );
                let eligible = durability::release_eligible();
                free(spi, key, Some(l.fence));
                handoff::poke_at_commit(hash);
                durability::released_if(eligible);
                handoff::hand_over(spi, key, hash);
                Ok(true)
            }
            _ => {
                keylock::unlock_key(hash);
                Ok(false)
            }
        }
    })
}

/// Deletes the row of a released key, unbinds it from this session at commit if bound here,
/// and hands the key to the head of its queue at commit.
fn free(spi: &spi::Spi, key: &str, fence: Option<i64>) {
    let hash = key_hash(key);
    store::delete(spi, key);
    if let Some(fence) = fence.filter(|f| session::is_bound_here(*f)) {
        session::unbind_at_commit(fence, hash);
    }
    handoff::wake_at_commit(hash);
}
