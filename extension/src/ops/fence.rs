//! `dlock_holds`: the fencing check.

use crate::locks::key as keylock;
use crate::locks::liveness::is_live;
use crate::pg::backend::now;
use crate::pg::{role, spi};
use crate::store;
use dlock_core::lease::Lease;
use dlock_core::{DlockError, key::key_hash};

/// `dlock_holds`: whether a live lease on `key` carries `fence`. When it does, the key stays
/// share-locked until the caller's transaction ends, so it cannot change hands before a fenced
/// write in the same transaction commits. That pin would delay the holder's renew and release
/// and the key's expiry, so it is only for the lease's own role and for roles trusted to fence
/// (`role::may_fence_others`): anyone else asking about another role's live lease gets 42501,
/// and pins nothing.
pub fn holds(key: &str, fence: i64, caller: u32) -> Result<bool, DlockError> {
    let hash = key_hash(key);
    let carries = |lease: &Lease| lease.fence == fence && is_live(lease, now());
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
