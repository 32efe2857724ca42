//! One acquire attempt, holding the key's lock: read the key's leases, let the contract's rules
//! decide (`dlock_core::lease`), write. A key lock is given back at once when nothing changed,
//! so only a transaction that *changed* a key keeps it busy for others until it ends.

use crate::locks::key as keylock;
use crate::locks::liveness;
use crate::ops::bind_to_session;
use crate::pg::backend::{my_pid, now};
use crate::pg::report::OrRaise;
use crate::pg::spi;
use crate::shards::{self, Admit};
use crate::stats::{self, Counter};
use crate::store::{self, Slot, sweep};
use crate::wait::{key_queue, wakeups};
use dlock_core::lease::{self, Acquire, Blocker, Caller, Kind, Request};
use dlock_core::time::expiry;
use dlock_core::{DlockError, Timestamp};

/// Why an attempt was not granted.
#[derive(Debug)]
pub enum NotGranted {
    /// Others hold the key (or queue for it): what to wait for. The key lock was given back.
    Busy(Blocker),
    /// The request cannot be granted as asked, now or later.
    Refused(DlockError),
}

/// One acquire attempt while holding the key lock: `Ok(fence)` when granted. `waiting`: the
/// caller already waits for this key (it is one of the queue, so others waiting do not stop it).
/// A newcomer first tries the one-statement grant when nobody waits (the key is usually free
/// then); waiters re-trying a busy key read first. `info`: an election leader's.
pub fn acquire(
    key: &str,
    hash: u64,
    caller: &Caller,
    request: &Request,
    info: Option<&str>,
    waiting: bool,
) -> Result<i64, NotGranted> {
    // The shard map's word first: a key this server may not grant (now) is refused or busy.
    if let Err(not_granted) = admitted([key]) {
        keylock::unlock_key(hash);
        return Err(not_granted);
    }
    spi::connect(|spi| {
        let now = now();
        let new = store::NewLease {
            key,
            owner: caller.owner,
            role: caller.role,
            acquired_at: now,
            expires_at: expiry(now, request.ttl),
            holder_pid: my_pid(),
            kind: request.kind,
            max_holders: request.max_holders,
            lock_delay: request.lock_delay,
            info,
        };
        let queue_ahead = !waiting && key_queue::is_occupied(hash);
        if !waiting
            && !queue_ahead
            && let Some(fence) = store::try_grant(spi, &new, Slot::for_grant(request.kind, false))
        {
            let fence = shards::check_fence(fence).or_raise("dlock");
            granted(spi, fence, hash, request, now);
            return Ok(fence);
        }
        let rows = store::read(spi, key);
        let state = liveness::state(&rows, now);
        let outcome = lease::acquire(&state, caller, request, now, queue_ahead);
        match outcome {
            Acquire::Grant { .. } => {
                // Others waiting (or the grantee among them): the lease goes into a row of its
                // own, so reads of this busy key need not walk the key row's versions.
                let slot =
                    Slot::for_grant(request.kind, waiting || queue_ahead || key_queue::is_occupied(hash));
                clear_over(spi, key, &rows, &state);
                let fence = shards::check_fence(store::grant(spi, &new, slot)).or_raise("dlock");
                granted(spi, fence, hash, request, now);
                Ok(fence)
            }
            Acquire::Reenter { fence, expires_at, bind_session } => {
                stats::count_at_commit(Counter::Reentries);
                let holder = state.of_owner(caller.owner).map_or(my_pid(), |l| l.holder_pid);
                store::reenter(
                    spi,
                    key,
                    caller.owner,
                    expires_at,
                    if bind_session { my_pid() } else { holder },
                );
                if bind_session {
                    bind_to_session(fence, hash);
                }
                Ok(fence)
            }
            refused => {
                shards::unpin();
                keylock::unlock_key(hash);
                Err(match refused {
                    Acquire::Busy(blocker) => NotGranted::Busy(blocker),
                    Acquire::ModeConflict { held } => NotGranted::Refused(DlockError::ModeConflict {
                        owner: caller.owner.to_string(),
                        held: held.describe(),
                        wanted: request.kind.describe(),
                    }),
                    Acquire::SizeMismatch { held } => NotGranted::Refused(DlockError::SizeMismatch {
                        held: permits(held),
                        asked: permits(request.max_holders),
                    }),
                    Acquire::Grant { .. } | Acquire::Reenter { .. } => unreachable!("handled above"),
                })
            }
        }
    })
}

/// The shard map's word on granting `keys` at once: refused (a key of another server, a client
/// with a newer map) or busy (a key behind its gate), the map's pin then given back; else the
/// map stays pinned for the grant.
pub fn admitted<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<(), NotGranted> {
    let not_granted = match shards::admit_all(keys) {
        Ok(Admit::Grant) => return Ok(()),
        Ok(Admit::Moving(until)) => NotGranted::Busy(Blocker::Expiry(until)),
        Err(error) => NotGranted::Refused(error),
    };
    shards::unpin();
    Err(not_granted)
}

/// Whether `caller` holds a live lease of `key` (any mode), by a look at its own row without
/// the key lock.
pub fn holds_own(key: &str, caller: &Caller) -> bool {
    let now = now();
    let rows = spi::connect(|spi| store::read_own(spi, key, caller.owner));
    liveness::state(&rows, now).of_owner(caller.owner).is_some()
}

/// A look at the key without its lock, as committed now: `Some(expiry)` when leases of others
/// hold it until then at least (the caller may sleep that long unless woken), `None` when an
/// attempt could decide otherwise (free, reentry, a session-bound holder, ...).
pub fn held_until(key: &str, caller: &Caller, request: &Request) -> Option<Timestamp> {
    let now = now();
    let rows = spi::connect(|spi| store::read(spi, key));
    match lease::acquire(&liveness::state(&rows, now), caller, request, now, false) {
        Acquire::Busy(Blocker::Expiry(expiry)) => Some(expiry),
        _ => None,
    }
}

/// Before a grant: frees the key's leases that are over (expired, their lock-delay run out, or
/// bound to a session that ended), counting each as ended, so that each is counted once and the
/// one-statement grant finds the key free next time. The caller's own lease that is over goes
/// too: it may sit in another row than the one the grant writes (a shared lease's owner row
/// under an exclusive grant into the key row), and an owner has one lease of a key at most.
pub fn clear_over(spi: &spi::Spi, key: &str, rows: &[lease::Lease], state: &lease::KeyState) {
    let now = now();
    for over in rows.iter().filter(|l| !state.counts(l)) {
        ended(key, over, now);
        store::free(spi, key, &over.owner, over.fence, now);
    }
}

/// Counts a lease that was over when its row went: it expired, or its session ended without
/// freeing it (a crash).
pub fn ended(key: &str, lease: &lease::Lease, now: Timestamp) {
    if lease.is_session_bound() {
        stats::count_at_commit(Counter::SessionEnds);
    } else {
        stats::expired(key, lease, now);
    }
}

fn permits(max_holders: Option<i32>) -> String {
    max_holders.map_or_else(|| "NULL".to_string(), |n| n.to_string())
}

/// After a new lease was written: bind it to the session if it is session-bound, tell an
/// election's watchers of its new leader, and do our share of keeping the table small.
fn granted(spi: &spi::Spi, fence: i64, hash: u64, request: &Request, now: Timestamp) {
    stats::count_at_commit(Counter::Grants);
    if request.ttl.is_none() {
        bind_to_session(fence, hash);
    }
    if request.kind == Kind::Leader {
        wakeups::notify_at_commit(hash);
        if request.ttl.is_some() {
            crate::elections::worker_start::wake_at_commit();
        }
    }
    sweep::after_grant(spi, now);
}
