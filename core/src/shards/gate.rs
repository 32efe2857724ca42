//! When a server may grant a key, under the newest map it knows.
//!
//! A server grants only its own keys. A key it gained from server A in the last map change is
//! gated until A can no longer have a live lease of it:
//! - A learnt the new map first (the operator installs a map on every server of the old map
//!   before any other), and from then on neither grants nor renews keys it lost, so its leases
//!   of them end by their expiry or release;
//! - the gate opens when A shows no live lease of a key it lost ([`Gates::drained`]), or
//!   `delay` (A's longest lease, its `dlock.max_ttl`) after A acknowledged the map or an
//!   operator declared A gone ([`Gates::start_timer`]).
//!
//! A server keeps one previous map, the one the newest replaced: a new map is refused while a
//! gate of the last change is still closed, unless the operator forces it.

use std::collections::BTreeMap;

use super::map::ShardMap;
use crate::time::Timestamp;

/// A gate on keys that moved here from one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The previous owner may still hold some of them.
    Closed,
    /// Open from this moment on.
    OpensAt(Timestamp),
}

/// What a server answers a grant of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Grant,
    /// Not this server's key under its map (`epoch`): the client's map is stale, or the
    /// server's is; `owner` is where this server would send the client.
    NotMine {
        epoch: i64,
        owner: String,
    },
    /// This server's key, but its previous owner may still hold it.
    Moving {
        from: String,
        opens_at: Option<Timestamp>,
    },
    /// The client knows a newer map than this server's (`epoch`): it retries later, when the
    /// operator's apply has reached this server.
    Behind {
        epoch: i64,
    },
}

/// Why a map is not installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    #[error("this server already has map epoch {have}; epoch {given} is not newer")]
    NotNewer { have: i64, given: i64 },
    #[error("the move to epoch {epoch} is not complete here: keys from {from} are still gated")]
    MoveInProgress { epoch: i64, from: String },
    #[error("this server already has map epoch {have}, newer than the map being replaced ({given})")]
    StalePrevious { have: i64, given: i64 },
}

/// A server's view of the shard map: its name, the newest map it was given, the one before,
/// and the gates on keys it gained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gates {
    me: String,
    map: Option<ShardMap>,
    previous: Option<ShardMap>,
    gates: BTreeMap<String, Gate>,
}

impl Gates {
    /// A server that was never given a map (it grants every key).
    pub fn unsharded(me: impl Into<String>) -> Self {
        Self { me: me.into(), map: None, previous: None, gates: BTreeMap::new() }
    }

    /// The state as stored: the map, the one before it, and the gates.
    pub fn restore(
        me: impl Into<String>,
        map: Option<ShardMap>,
        previous: Option<ShardMap>,
        gates: BTreeMap<String, Gate>,
    ) -> Self {
        Self { me: me.into(), map, previous, gates }
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    pub fn map(&self) -> Option<&ShardMap> {
        self.map.as_ref()
    }

    pub fn previous(&self) -> Option<&ShardMap> {
        self.previous.as_ref()
    }

    pub fn gates(&self) -> &BTreeMap<String, Gate> {
        &self.gates
    }

    /// The map's epoch, 0 with none (the epoch of this server's fences).
    pub fn epoch(&self) -> i64 {
        self.map.as_ref().map_or(0, ShardMap::epoch)
    }

    /// Installs `map`, which replaces `previous` in the deployment (`None`: the first map).
    /// The operator passes `previous`, not the server: a server that joins, or rejoins after
    /// missing maps, gates the keys it gains against their owners under the map being replaced,
    /// not under whatever it last saw. Installing the same map again is a no-op (a resumed
    /// apply); `force` replaces a map whose move is not complete here.
    pub fn install(
        &mut self,
        previous: Option<&ShardMap>,
        map: ShardMap,
        force: bool,
    ) -> Result<bool, InstallError> {
        if let Some(have) = &self.map {
            if map == *have {
                return Ok(false);
            }
            if map.epoch() <= have.epoch() {
                return Err(InstallError::NotNewer { have: have.epoch(), given: map.epoch() });
            }
            if !force && let Some((from, _)) = self.gates.iter().find(|(_, g)| **g == Gate::Closed) {
                return Err(InstallError::MoveInProgress { epoch: have.epoch(), from: from.clone() });
            }
        }
        if let Some(prev) = previous {
            if prev.epoch() >= map.epoch() {
                return Err(InstallError::NotNewer { have: prev.epoch(), given: map.epoch() });
            }
            if self.map.as_ref().is_some_and(|have| have.epoch() > prev.epoch()) {
                return Err(InstallError::StalePrevious { have: self.epoch(), given: prev.epoch() });
            }
        }
        // A gate against every other server of the map being replaced: keys are not
        // enumerable, so any of them may have owned a key that is now ours.
        self.gates.clear();
        if let Some(prev) = previous.filter(|_| map.contains(&self.me)) {
            for from in prev.servers().iter().filter(|s| **s != self.me) {
                self.gates.insert(from.clone(), Gate::Closed);
            }
        }
        self.previous = previous.cloned();
        self.map = Some(map);
        Ok(true)
    }

    /// `from` shows no live lease of keys it lost under `epoch`: keys from it are open now.
    pub fn drained(&mut self, from: &str, epoch: i64, now: Timestamp) {
        self.open(from, epoch, now);
    }

    /// `from` acknowledged map `epoch` (or an operator declared it gone) at `now`: keys from
    /// it open after `delay`, its longest lease.
    pub fn start_timer(&mut self, from: &str, epoch: i64, now: Timestamp, delay: i64) {
        self.open(from, epoch, now.saturating_add(delay));
    }

    fn open(&mut self, from: &str, epoch: i64, at: Timestamp) {
        if self.epoch() != epoch {
            return; // about another change: a newer map replaced its gates
        }
        if let Some(gate) = self.gates.get_mut(from) {
            *gate = match *gate {
                Gate::OpensAt(t) => Gate::OpensAt(t.min(at)),
                Gate::Closed => Gate::OpensAt(at),
            };
        }
    }

    /// Every gate is open at `now` (the change is complete here).
    pub fn complete(&self, now: Timestamp) -> bool {
        self.gates.values().all(|g| matches!(g, Gate::OpensAt(t) if *t <= now))
    }

    /// Whether this server may grant `key` at `now` to a client routing with map
    /// `client_epoch` (0: a client that does not shard). A client that knows a newer map than
    /// this server's is sent away: this server may not have learnt yet that it lost the key, or
    /// (with no map at all) that it is one of several.
    pub fn may_grant(&self, key: &str, client_epoch: i64, now: Timestamp) -> Verdict {
        if client_epoch > self.epoch() {
            return Verdict::Behind { epoch: self.epoch() };
        }
        let Some(map) = &self.map else { return Verdict::Grant };
        let owner = map.owner(key);
        if owner != self.me {
            return Verdict::NotMine { epoch: map.epoch(), owner: owner.to_owned() };
        }
        let Some(old) = &self.previous else { return Verdict::Grant };
        let from = old.owner(key);
        match self.gates.get(from) {
            None => Verdict::Grant, // ours before too
            Some(Gate::OpensAt(t)) if *t <= now => Verdict::Grant,
            Some(Gate::OpensAt(t)) => Verdict::Moving { from: from.to_owned(), opens_at: Some(*t) },
            Some(Gate::Closed) => Verdict::Moving { from: from.to_owned(), opens_at: None },
        }
    }

    /// Whether a live lease of `key` here may be renewed (or re-entered): only while the key
    /// is still this server's, so that a lease of a key that moved away runs out.
    pub fn may_keep(&self, key: &str) -> bool {
        self.map.as_ref().is_none_or(|m| m.owner(key) == self.me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(epoch: i64, servers: &[&str]) -> ShardMap {
        ShardMap::new(epoch, servers.iter().copied()).unwrap()
    }

    /// A key of `to` under `new` that was `from`'s under `old`.
    fn moved_key(old: &ShardMap, new: &ShardMap, from: &str, to: &str) -> String {
        (0..10_000).map(|i| format!("k{i}")).find(|k| old.owner(k) == from && new.owner(k) == to).unwrap()
    }

    #[test]
    fn an_unsharded_server_grants_everything() {
        let g = Gates::unsharded("a");
        assert_eq!(g.may_grant("x", 0, 0), Verdict::Grant);
        // ...but not to a client that routes with a map: it may be one of several servers.
        assert_eq!(g.may_grant("x", 1, 0), Verdict::Behind { epoch: 0 });
        assert!(g.may_keep("x"));
        assert_eq!(g.epoch(), 0);
    }

    #[test]
    fn a_first_map_has_no_gates_and_refuses_others_keys() {
        let mut g = Gates::unsharded("a");
        let m = map(1, &["a", "b"]);
        assert_eq!(g.install(None, m.clone(), false), Ok(true));
        let theirs = (0..100).map(|i| format!("k{i}")).find(|k| m.owner(k) == "b").unwrap();
        assert_eq!(g.may_grant(&theirs, 0, 0), Verdict::NotMine { epoch: 1, owner: "b".into() });
        assert!(!g.may_keep(&theirs));
        assert!(g.complete(0));
    }

    #[test]
    fn a_gained_key_waits_for_the_drain_or_the_timer() {
        let old = map(1, &["a", "b"]);
        let new = map(2, &["a", "b", "c"]);
        // c joins: it never had a map, and gates against the one being replaced.
        let mut c = Gates::unsharded("c");
        c.install(Some(&old), new.clone(), false).unwrap();
        let from_a = moved_key(&old, &new, "a", "c");
        let from_b = moved_key(&old, &new, "b", "c");
        assert_eq!(c.may_grant(&from_a, 0, 0), Verdict::Moving { from: "a".into(), opens_at: None });
        c.drained("a", 2, 100);
        assert_eq!(c.may_grant(&from_a, 0, 100), Verdict::Grant);
        c.start_timer("b", 2, 100, 50);
        assert_eq!(c.may_grant(&from_b, 0, 149), Verdict::Moving { from: "b".into(), opens_at: Some(150) });
        assert_eq!(c.may_grant(&from_b, 0, 150), Verdict::Grant);
        assert!(!c.complete(149) && c.complete(150));
        // A drain or timer of another epoch changes nothing.
        let mut d = c.clone();
        d.gates.insert("b".into(), Gate::Closed);
        d.drained("b", 1, 0);
        assert_eq!(d.gates["b"], Gate::Closed);
    }

    #[test]
    fn maps_only_go_forward_and_one_move_at_a_time() {
        let mut g = Gates::unsharded("a");
        let m3 = map(3, &["a", "b"]);
        let m4 = map(4, &["a", "c"]);
        g.install(None, m3.clone(), false).unwrap();
        assert_eq!(g.install(None, m3.clone(), false), Ok(false)); // resumed apply
        assert_eq!(g.install(None, map(3, &["a"]), false), Err(InstallError::NotNewer { have: 3, given: 3 }));
        assert_eq!(g.install(None, map(2, &["a"]), false), Err(InstallError::NotNewer { have: 3, given: 2 }));
        assert_eq!(
            g.install(Some(&map(2, &["a"])), m4.clone(), false),
            Err(InstallError::StalePrevious { have: 3, given: 2 })
        );
        g.install(Some(&m3), m4.clone(), false).unwrap();
        assert_eq!(
            g.install(Some(&m4), map(5, &["a"]), false),
            Err(InstallError::MoveInProgress { epoch: 4, from: "b".into() })
        );
        assert_eq!(g.install(Some(&m4), map(5, &["a"]), true), Ok(true));
        assert_eq!(g.epoch(), 5);
    }

    #[test]
    fn a_server_leaving_the_map_grants_nothing_and_keeps_nothing() {
        let mut g = Gates::unsharded("b");
        let m1 = map(1, &["a", "b"]);
        g.install(None, m1.clone(), false).unwrap();
        g.install(Some(&m1), map(2, &["a"]), false).unwrap();
        for i in 0..50 {
            let k = format!("k{i}");
            assert!(matches!(g.may_grant(&k, 0, 0), Verdict::NotMine { .. }));
            assert!(!g.may_keep(&k));
        }
        assert!(g.gates().is_empty());
    }
}
