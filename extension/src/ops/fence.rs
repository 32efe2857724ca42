//! `dlock_holds`: the fencing check.

use crate::locks::key as keylock;
use crate::locks::liveness::is_live;
use crate::pg::backend::now;
use crate::pg::{role, spi};
use crate::store;
use dlock_core::lease::Lease;
use dlock_core::{DlockError, key::key_hash};

/// The live lease of `key` that carries `fence`, if any.
fn carrier(key: &str, fence: i64) -> Option<Lease> {
    let now = now();
    spi::connect(|spi| store::read(spi, key)).into_iter().find(|l| l.fence == fence && is_live(l, now))
}

/// `dlock_holds`: whether a live lease on `key` carries `fence`. When one does, the key stays
/// share-locked until the caller's transaction ends, so it cannot change hands before a fenced
/// write in the same transaction commits. That pin would delay the holders' renews and releases
/// and the key's expiry, so it is only for the lease's own role and for roles trusted to fence
/// (`role::may_fence_others`): anyone else asking about another role's live lease gets 42501,
/// and pins nothing.
pub fn holds(key: &str, fence: i64, caller: u32) -> Result<bool, DlockError> {
    let hash = key_hash(key);
    // A first look, without a lock: a fence no live lease carries needs no pin.
    let Some(lease) = carrier(key, fence) else { return Ok(false) };
    if lease.role != caller && !role::may_fence_others(caller) {
        return Err(DlockError::NotFencer);
    }
    keylock::share_key(hash);
    let held = carrier(key, fence).is_some();
    if !held {
        keylock::unshare_key(hash);
    }
    Ok(held)
}
