//! `dlock_acquire_all`: every key of a set exclusively, or none. All the keys' locks are taken,
//! in one global order (by key hash, then text) so that two callers listing the same keys in any
//! order never wait for each other in a circle; the grants are written only once every key can
//! be granted, in one transaction, so no other session ever sees a subset held. A caller that
//! has to wait joins every key's queue, in the same order, and watches them all from their heads.

use crate::locks::{dropping, key as keylock, liveness};
use crate::ops::attempt::{self, NotGranted};
use crate::ops::bind_to_session;
use crate::ops::blocker::sleep_on;
use crate::pg::backend::{my_pid, now};
use crate::pg::report::OrRaise;
use crate::pg::signals;
use crate::pg::spi;
use crate::shards;
use crate::stats::{self, Counter};
use crate::store::{self, sweep};
use crate::wait::key_queue;
use dlock_core::lease::{self, Acquire, Caller, Lease, Request};
use dlock_core::{DlockError, Micros, Timestamp, key::key_hash};

/// One key of the set: its place in the caller's array, its text and hash.
struct Key<'a> {
    index: usize,
    text: &'a str,
    hash: u64,
}

/// Takes every key of `keys` as `request` asks (exclusively), waiting up to `wait` (`None`:
/// without limit): the fences in the order of `keys`, or `None` when not all in time.
pub fn acquire_all(
    keys: &[&str],
    caller: &Caller,
    request: &Request,
    wait: Option<Micros>,
) -> Result<Option<Vec<i64>>, DlockError> {
    let mut order: Vec<Key> =
        keys.iter().enumerate().map(|(index, text)| Key { index, text, hash: key_hash(text) }).collect();
    order.sort_by(|a, b| (a.hash, a.text).cmp(&(b.hash, b.text)));
    let try_only = wait == Some(0);
    let deadline = wait.map(|w| now().saturating_add(w));

    // As a newcomer: every key lock, then one attempt at the whole set.
    if lock_all(&order, deadline, try_only) {
        match attempt(&order, caller, request, false) {
            Ok(fences) => return Ok(Some(in_callers_order(keys.len(), fences))),
            Err(NotGranted::Refused(error)) => return Err(error),
            Err(NotGranted::Busy(_)) => {}
        }
    } else if !try_only {
        return Ok(None);
    }
    if try_only {
        return Ok(None);
    }
    if dropping::under_way() {
        return Err(DlockError::Dropping);
    }
    let what = format!("{} keys: {}", keys.len(), keys.join(", "));
    let _counted = stats::wait_started(false, &what, caller.owner, caller.role);
    let granted = wait_in_lines(&order, keys.len(), caller, request, deadline);
    match granted {
        Ok(Some(_)) => stats::wait_ended(stats::WaitOutcome::Granted),
        Ok(None) => stats::wait_ended(stats::WaitOutcome::TimedOut),
        Err(_) => {}
    }
    granted
}

/// Joins every key's queue, in the global order, and waits at all their heads.
fn wait_in_lines(
    order: &[Key],
    len: usize,
    caller: &Caller,
    request: &Request,
    deadline: Option<Timestamp>,
) -> Result<Option<Vec<i64>>, DlockError> {
    let mut joined = Vec::new();
    for key in order {
        if !key_queue::join(key.hash, deadline) {
            leave(&joined);
            return Ok(None);
        }
        joined.push(key.hash);
    }
    let granted = heads_loop(order, caller, request, deadline);
    if !matches!(granted, Ok(Some(_))) {
        leave(&joined);
    }
    granted.map(|fences| fences.map(|f| in_callers_order(len, f)))
}

/// Leaves the queues joined so far.
fn leave(joined: &[u64]) {
    for hash in joined.iter().rev() {
        key_queue::leave(*hash);
    }
}

/// Takes every key's lock, in order: at once or not at all for a try, else no later than
/// `deadline`. On failure, gives back those taken.
fn lock_all(order: &[Key], deadline: Option<Timestamp>, try_only: bool) -> bool {
    for (taken, key) in order.iter().enumerate() {
        let got = if try_only {
            keylock::try_lock_key(key.hash)
        } else {
            keylock::lock_key_until(key.hash, deadline)
        };
        if !got {
            unlock_all(&order[..taken]);
            return false;
        }
    }
    true
}

fn unlock_all(order: &[Key]) {
    for key in order {
        keylock::unlock_key(key.hash);
    }
}

/// One attempt at the whole set, holding every key lock: every key granted (or reentered), or
/// nothing written and every key lock given back.
fn attempt(
    order: &[Key],
    caller: &Caller,
    request: &Request,
    waiting: bool,
) -> Result<Vec<(usize, i64)>, NotGranted> {
    if let Err(not_granted) = attempt::admitted(order.iter().map(|k| k.text)) {
        unlock_all(order);
        return Err(not_granted);
    }
    spi::connect(|spi| {
        let now = now();
        let mut decisions = Vec::with_capacity(order.len());
        for key in order {
            let rows = store::read(spi, key.text);
            let state = liveness::state(&rows, now);
            let queue_ahead = !waiting && key_queue::is_occupied(key.hash);
            match lease::acquire(&state, caller, request, now, queue_ahead) {
                decision @ Acquire::Grant { .. } => {
                    // Deleted only if the whole set is granted: else this attempt writes nothing.
                    let over: Vec<Lease> = rows.iter().filter(|l| !state.counts(l)).cloned().collect();
                    decisions.push((decision, my_pid(), over));
                }
                decision @ Acquire::Reenter { .. } => {
                    let holder = state.of_owner(caller.owner).map_or(my_pid(), |l| l.holder_pid);
                    decisions.push((decision, holder, Vec::new()));
                }
                Acquire::Busy(blocker) => {
                    shards::unpin();
                    unlock_all(order);
                    return Err(NotGranted::Busy(blocker));
                }
                // Every request here is exclusive: an owner holding one of the keys shared.
                Acquire::ModeConflict { held } => {
                    shards::unpin();
                    unlock_all(order);
                    return Err(NotGranted::Refused(DlockError::ModeConflict {
                        owner: caller.owner.to_string(),
                        held: held.describe(),
                        wanted: request.kind.describe(),
                    }));
                }
                Acquire::SizeMismatch { .. } => unreachable!("an exclusive request has no permits"),
            }
        }
        let mut fences = Vec::with_capacity(order.len());
        for (key, (decision, holder, over)) in order.iter().zip(decisions) {
            let fence = match decision {
                Acquire::Grant { expires_at } => {
                    // As a single grant does (`attempt::clear_over`), the caller's own too.
                    for lease in &over {
                        attempt::ended(key.text, lease, now);
                        store::free(spi, key.text, &lease.owner, lease.fence, now);
                    }
                    stats::count_at_commit(Counter::Grants);
                    let slot =
                        store::Slot::for_grant(request.kind, waiting || key_queue::is_occupied(key.hash));
                    let fence = shards::check_fence(store::grant(
                        spi,
                        &store::NewLease {
                            key: key.text,
                            owner: caller.owner,
                            role: caller.role,
                            acquired_at: now,
                            expires_at,
                            holder_pid: my_pid(),
                            kind: request.kind,
                            max_holders: None,
                            lock_delay: request.lock_delay,
                            info: None,
                        },
                        slot,
                    ))
                    .or_raise("dlock_acquire_all");
                    if request.ttl.is_none() {
                        bind_to_session(fence, key.hash);
                    }
                    fence
                }
                Acquire::Reenter { fence, expires_at, bind_session } => {
                    let pid = if bind_session { my_pid() } else { holder };
                    store::reenter(spi, key.text, caller.owner, expires_at, pid);
                    if bind_session {
                        bind_to_session(fence, key.hash);
                    }
                    fence
                }
                _ => unreachable!("only grants and reentries are kept"),
            };
            fences.push((key.index, fence));
        }
        sweep::after_grant(spi, now);
        Ok(fences)
    })
}

/// At the head of every key's queue: try the whole set each time something may have changed,
/// until granted or `deadline`.
fn heads_loop(
    order: &[Key],
    caller: &Caller,
    request: &Request,
    deadline: Option<Timestamp>,
) -> Result<Option<Vec<(usize, i64)>>, DlockError> {
    loop {
        if dropping::under_way() {
            return Err(DlockError::Dropping);
        }
        crate::pg::latch::ensure_client_connected();
        signals::clear_poke();
        if !lock_all(order, deadline, false) {
            return Ok(None);
        }
        let blocker = match attempt(order, caller, request, true) {
            Ok(fences) => return Ok(Some(fences)),
            Err(NotGranted::Refused(error)) => return Err(error),
            Err(NotGranted::Busy(blocker)) => blocker,
        };
        let now = now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        // Every key's release wakes us (we head every queue); expiries we sleep until.
        sleep_on(blocker, now, deadline)?;
    }
}

/// The fences in the order of the caller's array.
fn in_callers_order(len: usize, fences: Vec<(usize, i64)>) -> Vec<i64> {
    let mut ordered = vec![0; len];
    for (index, fence) in fences {
        ordered[index] = fence;
    }
    ordered
}
