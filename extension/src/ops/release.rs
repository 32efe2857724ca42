//! Giving leases back: `dlock_release` (one hold), `dlock_release_all` (every lease of an
//! owner) and `dlock_force_release` (administrators). A freed key is handed to the head of its
//! queue (at commit, or directly in this transaction when preloaded: `ops/handoff.rs`).

use crate::locks::key as keylock;
use crate::locks::liveness::{classify, is_live};
use crate::locks::session;
use crate::ops::{handoff, standing};
use crate::pg::backend::now;
use crate::pg::{role, spi};
use crate::store::{self, durability};
use crate::wait::wakeups;
use dlock_core::lease::{self, Current, Release};
use dlock_core::{DlockError, key::key_hash};

/// `dlock_release`: whether the caller held the lease (one hold given back).
pub fn release(key: &str, owner: &str, role: u32) -> Result<bool, DlockError> {
    let hash = key_hash(key);
    keylock::lock_key(hash);
    spi::connect(|spi| {
        let now = now();
        let eligible = durability::release_eligible();
        if store::release_last_hold(spi, key, owner, role, now) {
            wakeups::wake_at_commit(hash);
            durability::released_if(eligible);
            handoff::hand_over(spi, key, hash);
            return Ok(true);
        }
        // Off the common path: admin standing (catalog lookups) only matters from here on.
        let caller = standing(owner, role);
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
pub fn release_all(owner: &str, role: u32) -> i32 {
    let caller = standing(owner, role);
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

/// `dlock_force_release`: frees the key whoever holds it; admins only.
pub fn force_release(key: &str, role: u32) -> Result<bool, DlockError> {
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
                wakeups::poke_at_commit(hash);
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
    wakeups::wake_at_commit(hash);
}
