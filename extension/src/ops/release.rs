//! Giving leases back: `dlock_release` (one hold), `dlock_release_all` (every lease of an
//! owner) and `dlock_force_release` (administrators: every holder of a key). A freed key is
//! handed to the head of its queue (at commit, or directly in this transaction when preloaded:
//! `ops/handoff.rs`).

use crate::locks::key as keylock;
use crate::locks::liveness;
use crate::locks::session;
use crate::ops::locking::{self, Locking};
use crate::ops::{handoff, standing};
use crate::pg::backend::now;
use crate::pg::{role, spi};
use crate::stats::{self, Counter};
use crate::store::{self, durability};
use crate::wait::{free_waiters, key_queue, wakeups};
use dlock_core::lease::{self, Kind, Lease, Release};
use dlock_core::{DlockError, key::key_hash};

/// `dlock_release`: whether the caller held the lease (one hold given back).
pub fn release(key: &str, owner: &str, role: u32) -> Result<bool, DlockError> {
    let hash = key_hash(key);
    // A shared lease this session took, with nobody waiting for the key (so nothing to hand
    // over): released with share-mode locks, beside other shared holders' releases.
    if locking::take_shared(key, owner) && !key_queue::is_occupied(hash) {
        let locks = Locking::shared_release(key, hash, owner);
        locks.take(None, false);
        let released = spi::connect(|spi| {
            let eligible = durability::release_eligible();
            let kind = store::release_last_hold(spi, key, owner, role, now(), Some(Kind::Shared))?;
            stats::count_at_commit(Counter::Releases);
            freed(key, hash, kind);
            durability::released_if(eligible);
            Some(())
        });
        if released.is_some() {
            return Ok(true);
        }
        locks.give_back();
    }
    keylock::lock_key(hash);
    spi::connect(|spi| {
        let now = now();
        let eligible = durability::release_eligible();
        if let Some(kind) = store::release_last_hold(spi, key, owner, role, now, None) {
            stats::count_at_commit(Counter::Releases);
            freed(key, hash, kind);
            durability::released_if(eligible);
            handoff::hand_over(spi, key, hash, kind.is_shared());
            return Ok(true);
        }
        // Off the common path: admin standing (catalog lookups) only matters from here on.
        let caller = standing(owner, role);
        let rows = store::read(spi, key);
        let state = liveness::state(&rows, now);
        match lease::release(&state, &caller) {
            Release::Decrement => {
                store::decrement(spi, key, owner);
                durability::released_if(eligible);
                Ok(true)
            }
            Release::Free => {
                let lease = state.of_owner(owner).expect("a holder has a lease");
                stats::count_at_commit(Counter::Releases);
                free(spi, key, lease);
                durability::released_if(eligible);
                handoff::hand_over(spi, key, hash, lease.kind.is_shared());
                Ok(true)
            }
            Release::NotHeld => {
                keylock::unlock_key(hash);
                Ok(false)
            }
            // Let go of the key first: the error reaches the client before the transaction
            // aborts, and a try sent the moment it arrives must not find the key locked.
            Release::Forbidden => {
                keylock::unlock_key(hash);
                Err(DlockError::ForeignRole { action: "release" })
            }
        }
    })
}

/// `dlock_release_all`: frees every live lease of `owner` (of the caller's role unless admin).
pub fn release_all(owner: &str, role: u32) -> i32 {
    let caller = standing(owner, role);
    let role_filter = (!caller.admin).then_some(caller.role);
    spi::connect(|spi| {
        let eligible = durability::release_eligible();
        let mut released = Vec::new();
        // Key order: two release_all calls lock their keys in the same order.
        for key in store::keys_of_owner(spi, owner, role_filter) {
            let hash = key_hash(&key);
            keylock::lock_key(hash);
            let rows = store::read(spi, &key);
            let state = liveness::state(&rows, now());
            match state.of_owner(owner).filter(|l| role_filter.is_none_or(|r| r == l.role)) {
                Some(lease) => {
                    stats::count_at_commit(Counter::Releases);
                    free(spi, &key, lease);
                    released.push((key, lease.kind));
                }
                None => keylock::unlock_key(hash),
            }
        }
        if !released.is_empty() {
            durability::released_if(eligible);
        }
        for (key, kind) in &released {
            handoff::hand_over(spi, key, key_hash(key), kind.is_shared());
        }
        released.len() as i32
    })
}

/// `dlock_force_release`: frees the key whoever holds it (every holder), and ends a lock-delay
/// that holds it back after an expiry (else any role could keep any key from everyone for up
/// to `dlock.max_ttl` with one short lease); admins only. Whether there was anything to free.
pub fn force_release(key: &str, role: u32) -> Result<bool, DlockError> {
    if !role::is_admin(role) {
        return Err(DlockError::NotAdmin { function: "dlock_force_release" });
    }
    let hash = key_hash(key);
    keylock::lock_key(hash);
    spi::connect(|spi| {
        let rows = store::read(spi, key);
        let state = liveness::state(&rows, now());
        if state.is_free() {
            keylock::unlock_key(hash);
            return Ok(false);
        }
        let eligible = durability::release_eligible();
        let now = now();
        for lease in &state.held_back_by {
            pgrx::log!(
                "dlock: key {key:?}: lock-delay ended by {} (owner {:?}, fence {}, role {}, {:.3} s of it left)",
                role::name(role),
                lease.owner,
                lease.fence,
                role::name(lease.role),
                (lease.delay_ends() - now) as f64 / 1e6,
            );
            store::free(spi, key, &lease.owner, lease.fence, now);
        }
        if !state.held_back_by.is_empty() {
            // The head sleeps until the delay's end: wake it at commit.
            wakeups::wake_at_commit(hash);
        }
        for lease in &state.live {
            let left = if lease.is_session_bound() {
                "bound to its session".to_string()
            } else {
                format!("{:.3} s of its ttl left", (lease.expires_at - now) as f64 / 1e6)
            };
            pgrx::log!(
                "dlock: key {key:?} force-released by {} (owner {:?}, fence {}, role {}, {}, held for {:.3} s, {left})",
                role::name(role),
                lease.owner,
                lease.fence,
                role::name(lease.role),
                lease.kind.mode(),
                (now - lease.acquired_at) as f64 / 1e6,
            );
            stats::count_at_commit(Counter::ForceReleases);
            free(spi, key, lease);
        }
        // The head may wait on the old holder's binding, which stays in place: poke it.
        wakeups::poke_at_commit(hash);
        free_waiters::freed(hash, key);
        durability::released_if(eligible);
        handoff::hand_over(spi, key, hash, true);
        Ok(true)
    })
}

/// The open transaction freed a lease of `kind` on the key: wake the head of its queue at
/// commit (and those waiting to see the key free); if other shared holders may remain, the head
/// may be waiting on one of their bindings, so poke it too.
fn freed(key: &str, hash: u64, kind: Kind) {
    wakeups::wake_at_commit(hash);
    free_waiters::freed(hash, key);
    if kind.is_shared() {
        wakeups::poke_at_commit(hash);
    }
}

/// Deletes `lease`'s row of `key`, unbinds it from this session at commit if bound here, and
/// wakes the head of the key's queue at commit.
fn free(spi: &spi::Spi, key: &str, lease: &Lease) {
    let hash = key_hash(key);
    store::free(spi, key, &lease.owner, lease.fence, now());
    if session::is_bound_here(lease.fence) {
        session::unbind_at_commit(lease.fence, hash);
    }
    freed(key, hash, lease.kind);
}
