//! What an operator's apply of a shard map does on each server (`dlock shards apply` calls these
//! in order; docs/src/guide/beyond-one-server.md): install the map, count the leases of keys it
//! gave away that are still held here, and open a gate when the server the keys came from is
//! drained, or start its timer when that server cannot be reached.

use super::state;
use crate::fast;
use crate::locks::liveness;
use crate::pg::backend::now;
use crate::pg::spi;
use crate::store;
use dlock_core::shards::fence::{self, COUNTER_BITS};
use dlock_core::shards::{Gates, ShardMap};
use dlock_core::{DlockError, Micros, Timestamp};
use std::collections::BTreeMap;

fn map(epoch: i64, servers: Vec<String>) -> Result<ShardMap, DlockError> {
    ShardMap::new(epoch, servers).map_err(|e| DlockError::BadShardMap(e.to_string()))
}

/// Installs map `epoch`/`servers` on this server, which is `me` in it, replacing
/// `previous` (`None`: the deployment's first map). `Ok(false)`: this server has it already
/// (a resumed apply). Waits for grants in progress under the map it replaces (see `state`).
pub fn install(
    me: &str,
    epoch: i64,
    servers: Vec<String>,
    previous: Option<(i64, Vec<String>)>,
    force: bool,
) -> Result<bool, DlockError> {
    let new = map(epoch, servers)?;
    let previous = previous.map(|(epoch, servers)| map(epoch, servers)).transpose()?;
    ShardMap::new(1, [me]).map_err(|e| DlockError::BadShardMap(e.to_string()))?;
    if !new.contains(me) && !previous.as_ref().is_some_and(|p| p.contains(me)) {
        return Err(DlockError::BadShardMap(format!(
            "server {me:?} is neither in map epoch {epoch} nor in the map it replaces"
        )));
    }
    if !state::lock_for_change() {
        return Err(DlockError::ShardState(
            "this database's dlock has no shard map table: run ALTER EXTENSION dlock UPDATE".into(),
        ));
    }
    spi::connect(|spi| {
        let mut gates = state::load(spi);
        if gates.map().is_some() && gates.me() != me && !force {
            return Err(DlockError::ShardState(format!(
                "this server is {:?} in its shard map, not {me:?}",
                gates.me()
            )));
        }
        if gates.me() != me {
            gates = Gates::restore(me, gates.map().cloned(), gates.previous().cloned(), Default::default());
        }
        let changed = gates
            .install(previous.as_ref(), new, force)
            .map_err(|e| DlockError::ShardState(format!("shard map epoch {epoch} not installed: {e}")))?;
        if !changed {
            return Ok(false);
        }
        // Fences of this epoch start above every fence of the earlier ones, here and anywhere.
        let floor = epoch << COUNTER_BITS;
        let last = state::last_fence(spi);
        if fence::epoch_of(last) > epoch {
            return Err(DlockError::ShardState(format!(
                "this server's last fence ({last}) is beyond shard map epoch {epoch}'s range"
            )));
        }
        if last < floor {
            state::raise_fences_to(spi, floor);
        }
        state::save(spi, &gates, now());
        state::changed();
        Ok(true)
    })
}

/// Checks that this server's map is `epoch` (the epoch an operator's call is about).
fn at_epoch(gates: &Gates, epoch: i64) -> Result<(), DlockError> {
    if gates.map().is_none() || gates.epoch() != epoch {
        return Err(DlockError::ShardState(format!(
            "this server has shard map epoch {}, not {epoch}",
            gates.epoch()
        )));
    }
    Ok(())
}

/// Keys this server gave away under its map `epoch` that a lease here still holds, or holds
/// back by a lock-delay (durable and fast leases): the move of those keys waits for them.
pub fn draining(epoch: i64) -> Result<i64, DlockError> {
    state::pin();
    let gates = state::current();
    at_epoch(&gates, epoch)?;
    let now = now();
    let rows = spi::connect(store::all);
    let mut by_key: BTreeMap<&str, Vec<dlock_core::lease::Lease>> = BTreeMap::new();
    for (key, lease) in &rows {
        if !gates.may_keep(key) {
            by_key.entry(key.as_str()).or_default().push(lease.clone());
        }
    }
    let mut held: std::collections::BTreeSet<String> = by_key
        .iter()
        .filter(|(_, leases)| !liveness::state(leases, now).is_free())
        .map(|(key, _)| (*key).to_owned())
        .collect();
    for lease in fast::live().unwrap_or_default() {
        if !gates.may_keep(&lease.key) {
            held.insert(lease.key);
        }
    }
    Ok(held.len() as i64)
}

/// Opens the gate on keys from `from` now: it showed no lease of the keys it lost under map
/// `epoch` (`draining` answered 0 there, after it had installed the map). `false` if already open.
pub fn drained(from: &str, epoch: i64) -> Result<bool, DlockError> {
    open(from, epoch, |gates, now| gates.drained(from, epoch, now))
}

/// Starts the timer of the gate on keys from `from`: it opens `delay` from now. For a server
/// that cannot be reached, `delay` is its longest lease and lock-delay; a server that can is
/// better asked (`draining`). When the gate opens.
pub fn timer(from: &str, epoch: i64, delay: Micros) -> Result<Option<Timestamp>, DlockError> {
    open(from, epoch, |gates, now| gates.start_timer(from, epoch, now, delay))?;
    Ok(state::current().gates().get(from).and_then(|g| match g {
        dlock_core::shards::Gate::OpensAt(t) => Some(*t),
        dlock_core::shards::Gate::Closed => None,
    }))
}

fn open(from: &str, epoch: i64, change: impl FnOnce(&mut Gates, Timestamp)) -> Result<bool, DlockError> {
    spi::connect(|spi| {
        state::pin();
        let mut gates = state::load(spi);
        at_epoch(&gates, epoch)?;
        if !gates.gates().contains_key(from) {
            return Err(DlockError::BadShardMap(format!(
                "this server has no gate on keys from {from:?} under shard map epoch {epoch}"
            )));
        }
        let before = gates.gates().get(from).copied();
        change(&mut gates, now());
        let after = gates.gates().get(from).copied();
        if after == before {
            return Ok(false);
        }
        if let Some(dlock_core::shards::Gate::OpensAt(at)) = after {
            state::open_gate(spi, from, at);
        }
        state::changed();
        Ok(true)
    })
}
