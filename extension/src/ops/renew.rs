//! `dlock_renew`: the holder of a live lease moves its expiry.

use crate::locks::key as keylock;
use crate::locks::liveness;
use crate::ops::standing;
use crate::pg::backend::now;
use crate::pg::spi;
use crate::store;
use crate::wait::wakeups;
use dlock_core::lease::{self, Renew};
use dlock_core::{DlockError, INFINITY, Micros, Timestamp, key::key_hash};

/// `dlock_renew`: the new `expires_at`, `INFINITY` for a session-bound lease, `None` if not held.
pub fn renew(key: &str, owner: &str, role: u32, ttl: Micros) -> Result<Option<Timestamp>, DlockError> {
    let caller = standing(owner, role);
    // A lease of a key this server gave away runs out: it is not renewed here.
    crate::shards::keep(key)?;
    let hash = key_hash(key);
    keylock::lock_key(hash);
    spi::connect(|spi| {
        let now = now();
        let rows = store::read(spi, key);
        let state = liveness::state(&rows, now);
        match lease::renew(&state, &caller, ttl, now) {
            Renew::Extend(expires_at) => {
                store::set_expiry(spi, key, owner, expires_at);
                // A shorter lease: the head of the queue sleeps until the old expiry; wake it.
                if state.of_owner(owner).is_some_and(|l| expires_at < l.expires_at) {
                    wakeups::wake_at_commit(hash);
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
