//! Keys over several servers, this server's side (the rules are `dlock_core::shards`; the
//! design is docs/src/internals/shard-moves.md): a server grants only keys its newest map gives
//! it, and only to clients that do not route with a newer map (`dlock.shard_epoch`); a key it
//! gained in the last change waits behind its gate, as a held key does; a lease of a key it lost
//! is neither renewed nor re-entered, and runs out. Its fences carry the map's epoch: an install
//! moves the fence sequence up to `epoch << 43`.
//!
//! Every check pins the map (`state::pin`) for the rest of the transaction, so no grant made
//! under one map commits after the next one was installed here.

pub mod admin;
pub mod state;

use crate::pg::backend::now;
use crate::settings;
use dlock_core::shards::{Verdict, fence};
use dlock_core::{DlockError, Timestamp};

/// How long a grant of a key behind a closed gate waits before it looks again: the gate opens
/// by an operator's call, which wakes nobody.
const CLOSED_GATE_RECHECK_US: i64 = 250_000;

/// Whether a grant of a key may go ahead.
pub enum Admit {
    Grant,
    /// The key moved here and its previous server may still hold it: busy until then.
    Moving(Timestamp),
}

/// The check of a grant of every key of `keys` at once (acquires, reentries, elections, and
/// `dlock_acquire_all`'s sets): the map stays pinned (`unpin` after an attempt that wrote
/// nothing). The first key refused is the error; busy until the latest gate of any opens.
pub fn admit_all<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<Admit, DlockError> {
    state::pin();
    let gates = state::current();
    let (given, now) = (settings::shard_epoch(), now());
    let mut admit = Admit::Grant;
    for key in keys {
        match gates.may_grant(key, given, now) {
            Verdict::Grant => {}
            Verdict::Moving { opens_at, .. } => {
                let until = opens_at.unwrap_or_else(|| now.saturating_add(CLOSED_GATE_RECHECK_US));
                admit = Admit::Moving(match admit {
                    Admit::Moving(other) => other.max(until),
                    Admit::Grant => until,
                });
            }
            Verdict::NotMine { epoch, owner } => {
                return Err(DlockError::NotMine {
                    key: key.to_owned(),
                    owner,
                    me: gates.me().to_owned(),
                    epoch,
                });
            }
            Verdict::Behind { epoch } => return Err(DlockError::MapBehind { have: epoch, given }),
        }
    }
    Ok(admit)
}

/// The check of a renewal of a lease of `key`: only while the key is still this server's, and
/// not for a client that knows a newer map (this server may have lost the key without knowing).
pub fn keep(key: &str) -> Result<(), DlockError> {
    state::pin();
    let gates = state::current();
    let given = settings::shard_epoch();
    if given > gates.epoch() {
        return Err(DlockError::MapBehind { have: gates.epoch(), given });
    }
    if gates.may_keep(key) {
        return Ok(());
    }
    let map = gates.map().expect("may_keep is true without a map");
    Err(DlockError::NotMine {
        key: key.to_owned(),
        owner: map.owner(key).to_owned(),
        me: gates.me().to_owned(),
        epoch: map.epoch(),
    })
}

/// Whether a releaser may hand `key` over to its waiter: only a key this server may grant now
/// (the waiter, refused, learns why when it looks again itself).
pub fn may_hand_over(key: &str) -> bool {
    state::pin();
    matches!(state::current().may_grant(key, 0, now()), Verdict::Grant)
}

/// Gives back the pin of a check whose attempt wrote nothing.
pub fn unpin() {
    state::unpin();
}

/// Fast mode's check: none of it on a server with a map (its fences come from the WAL position
/// and cannot carry the map's epoch).
pub fn forbid_fast() -> Result<(), DlockError> {
    state::pin();
    if state::current().map().is_some() {
        return Err(DlockError::FastSharded);
    }
    state::unpin();
    Ok(())
}

/// A fence drawn under the pinned map: it must carry the map's epoch (the sequence ran out of
/// the epoch's 2^43 values only after 8.8 × 10^12 grants; never wrap into the next epoch's).
pub fn check_fence(fence: i64) -> Result<i64, DlockError> {
    let epoch = state::current().epoch();
    if epoch > 0 && fence::epoch_of(fence) != epoch {
        return Err(DlockError::ShardState(format!(
            "fence {fence} is outside shard map epoch {epoch}'s range: this server handed out all \
             of its fences under this epoch"
        )));
    }
    Ok(fence)
}
