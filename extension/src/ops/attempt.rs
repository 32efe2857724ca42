//! One acquire attempt, holding the key's lock: read the row, let the contract's rules decide
//! (`dlock_core::lease`), write. A key lock is given back at once when nothing changed, so only
//! a transaction that *changed* a key keeps it busy for others until it ends.

use crate::locks::key as keylock;
use crate::locks::liveness::classify;
use crate::ops::bind_to_session;
use crate::pg::backend::{my_pid, now};
use crate::pg::spi;
use crate::store::{self, sweep};
use crate::wait::queue;
use dlock_core::lease::{self, Acquire, Blocker, Caller};
use dlock_core::time::expiry;
use dlock_core::{Micros, Timestamp};

/// One acquire attempt while holding the key lock: `Ok(fence)` when granted, otherwise what
/// the key waits for, with the key lock given back.
/// `waiting`: the caller already waits for this key (it is one of the queue, so others waiting
/// do not stop it). A newcomer first tries the one-statement grant when nobody waits (the key
/// is usually free then); waiters re-trying a busy key read first.
pub fn acquire(
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
            expires_at: expiry(now, ttl),
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
                    bind_to_session(fence, hash);
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
        bind_to_session(fence, hash);
    }
    sweep::after_grant(spi, now);
}
