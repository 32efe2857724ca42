//! A model test of the shard-map move protocol (core/src/shards): servers with lease tables
//! and fence counters, clients routing with maps that go stale, an operator applying map
//! changes step by step, servers going down and coming back, time passing. After every step:
//! no key is live on two servers, and every grant's fence is above every earlier grant's of the
//! same key. The same model with the gates left open (the move's lock-delay turned off) must
//! find overlaps: the check can fail.

use std::collections::{BTreeMap, BTreeSet};

use dlock_core::shards::{Gates, ShardMap, Verdict, fence};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];
const KEYS: usize = 6;
const CLIENTS: usize = 3;
/// Every lease's ttl; also the servers' max_ttl, the gate's delay.
const TTL: i64 = 10;

#[derive(Clone, Debug)]
enum Action {
    Tick(i64),
    Acquire {
        client: usize,
        key: usize,
    },
    Renew {
        client: usize,
        key: usize,
    },
    Release {
        client: usize,
        key: usize,
    },
    Down(usize),
    Up(usize),
    /// The operator starts a change (if the last one is complete): 0 adds, 1 removes, 2 replaces.
    NewMap {
        how: u8,
        pick: usize,
    },
    /// One step of the operator's apply, on one server: 0 install, 1 drain check, 2 timer.
    Apply {
        server: usize,
        step: u8,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => (1..=4i64).prop_map(Action::Tick),
        4 => (0..CLIENTS, 0..KEYS).prop_map(|(client, key)| Action::Acquire { client, key }),
        2 => (0..CLIENTS, 0..KEYS).prop_map(|(client, key)| Action::Renew { client, key }),
        1 => (0..CLIENTS, 0..KEYS).prop_map(|(client, key)| Action::Release { client, key }),
        1 => (0..NAMES.len()).prop_map(Action::Down),
        2 => (0..NAMES.len()).prop_map(Action::Up),
        1 => (0..3u8, 0..NAMES.len()).prop_map(|(how, pick)| Action::NewMap { how, pick }),
        5 => (0..NAMES.len(), 0..3u8).prop_map(|(server, step)| Action::Apply { server, step }),
    ]
}

struct Lease {
    client: usize,
    expires: i64,
}

struct Server {
    gates: Gates,
    up: bool,
    counter: i64,
    leases: BTreeMap<String, Lease>,
}

/// A change in progress: the map it replaces, the new one, who installed it when.
struct Change {
    previous: ShardMap,
    next: ShardMap,
    acked: BTreeMap<String, i64>,
}

struct World {
    now: i64,
    sabotage: bool,
    servers: BTreeMap<String, Server>,
    clients: Vec<ShardMap>,
    current: ShardMap,
    change: Option<Change>,
    /// Per key: the greatest fence granted so far.
    fences: BTreeMap<String, i64>,
    /// Per client: keys it believes it holds, and where.
    held: Vec<BTreeMap<String, String>>,
    grants: usize,
    moves: usize,
}

fn key(k: usize) -> String {
    format!("k{k}")
}

impl World {
    fn new(sabotage: bool) -> Self {
        let first = ShardMap::new(1, ["a", "b", "c"]).unwrap();
        let mut servers = BTreeMap::new();
        for name in NAMES {
            let mut gates = Gates::unsharded(name);
            if first.contains(name) {
                gates.install(None, first.clone(), false).unwrap();
            }
            servers.insert(name.to_owned(), Server { gates, up: true, counter: 0, leases: BTreeMap::new() });
        }
        World {
            now: 0,
            sabotage,
            servers,
            clients: vec![first.clone(); CLIENTS],
            current: first,
            change: None,
            fences: BTreeMap::new(),
            held: vec![BTreeMap::new(); CLIENTS],
            grants: 0,
            moves: 0,
        }
    }

    fn live(&self, server: &Server, key: &str) -> bool {
        server.leases.get(key).is_some_and(|l| l.expires > self.now)
    }

    fn step(&mut self, a: &Action) -> Result<(), String> {
        match *a {
            Action::Tick(d) => self.now += d,
            Action::Acquire { client, key: k } => self.acquire(client, &key(k))?,
            Action::Renew { client, key: k } => {
                let k = key(k);
                let Some(at) = self.held[client].get(&k).cloned() else { return Ok(()) };
                let now = self.now;
                let s = self.servers.get_mut(&at).unwrap();
                let mine = s.leases.get(&k).is_some_and(|l| l.client == client && l.expires > now);
                if s.up && mine && s.gates.may_keep(&k) {
                    s.leases.get_mut(&k).unwrap().expires = now + TTL;
                }
            }
            Action::Release { client, key: k } => {
                let k = key(k);
                if let Some(at) = self.held[client].remove(&k) {
                    let s = self.servers.get_mut(&at).unwrap();
                    if s.up && s.leases.get(&k).is_some_and(|l| l.client == client) {
                        s.leases.remove(&k);
                    }
                }
            }
            Action::Down(i) => self.servers.get_mut(NAMES[i]).unwrap().up = false,
            Action::Up(i) => self.servers.get_mut(NAMES[i]).unwrap().up = true,
            Action::NewMap { how, pick } => self.new_map(how, pick),
            Action::Apply { server, step } => self.apply(NAMES[server], step),
        }
        self.check()
    }

    fn acquire(&mut self, client: usize, k: &str) -> Result<(), String> {
        let map = self.clients[client].clone();
        let target = map.owner(k).to_owned();
        let now = self.now;
        let busy = self.live(&self.servers[&target], k);
        let s = self.servers.get_mut(&target).unwrap();
        if !s.up {
            return Ok(());
        }
        match s.gates.may_grant(k, map.epoch(), now) {
            Verdict::Grant if !busy => {
                s.counter += 1;
                let fence = fence::compose(s.gates.epoch(), s.counter).unwrap();
                s.leases.insert(k.to_owned(), Lease { client, expires: now + TTL });
                self.held[client].insert(k.to_owned(), target);
                self.grants += 1;
                let last = self.fences.insert(k.to_owned(), fence).unwrap_or(0);
                if fence <= last {
                    return Err(format!("fence of {k} went from {last} to {fence} at t={now}"));
                }
            }
            Verdict::NotMine { .. } | Verdict::Behind { .. } | Verdict::Grant | Verdict::Moving { .. } => {
                // Refresh from the server, as a client told MOVED does, when it knows newer.
                if let Some(theirs) = s.gates.map()
                    && theirs.epoch() > map.epoch()
                {
                    self.clients[client] = theirs.clone();
                }
            }
        }
        Ok(())
    }

    fn new_map(&mut self, how: u8, pick: usize) {
        if self.change.is_some() {
            return;
        }
        let mut names: BTreeSet<&str> = self.current.servers().iter().map(String::as_str).collect();
        let outside: Vec<&str> = NAMES.iter().copied().filter(|n| !names.contains(n)).collect();
        let inside: Vec<&str> = names.iter().copied().collect();
        match how {
            0 if !outside.is_empty() => {
                names.insert(outside[pick % outside.len()]);
            }
            1 if inside.len() > 1 => {
                names.remove(inside[pick % inside.len()]);
            }
            2 if !outside.is_empty() => {
                names.remove(inside[pick % inside.len()]);
                names.insert(outside[pick % outside.len()]);
            }
            _ => return,
        }
        let next = ShardMap::new(self.current.epoch() + 1, names).unwrap();
        self.change = Some(Change { previous: self.current.clone(), next, acked: BTreeMap::new() });
    }

    fn apply(&mut self, name: &str, step: u8) {
        let now = self.now;
        let sabotage = self.sabotage;
        let Some(change) = &mut self.change else { return };
        let epoch = change.next.epoch();
        match step {
            // Install: every server of the old map first, then the new servers.
            0 => {
                let old_done = change.previous.servers().iter().all(|s| change.acked.contains_key(s));
                let eligible = change.previous.contains(name) || (change.next.contains(name) && old_done);
                let s = self.servers.get_mut(name).unwrap();
                if eligible && s.up && !change.acked.contains_key(name) {
                    s.gates.install(Some(&change.previous), change.next.clone(), false).unwrap();
                    change.acked.insert(name.to_owned(), now);
                    if sabotage {
                        for from in change.previous.servers() {
                            s.gates.drained(from, epoch, now);
                        }
                    }
                }
            }
            // Drain check: `name` knows the map and shows no live lease of a key it lost.
            1 => {
                let s = &self.servers[name];
                let lost_live = s.leases.iter().any(|(k, l)| l.expires > now && change.next.owner(k) != name);
                if s.up && change.acked.contains_key(name) && !lost_live {
                    for other in change.next.servers() {
                        if change.acked.contains_key(other) && self.servers[other.as_str()].up {
                            self.servers.get_mut(other.as_str()).unwrap().gates.drained(name, epoch, now);
                        }
                    }
                }
            }
            // Timer: `name` acknowledged the map; its longest lease runs out within the ttl.
            _ => {
                if change.acked.contains_key(name) {
                    for other in change.next.servers() {
                        if change.acked.contains_key(other) && self.servers[other.as_str()].up {
                            self.servers
                                .get_mut(other.as_str())
                                .unwrap()
                                .gates
                                .start_timer(name, epoch, now, TTL);
                        }
                    }
                }
            }
        }
        let all = change.previous.servers().iter().chain(change.next.servers());
        let done = all.clone().all(|s| change.acked.contains_key(s))
            && change.next.servers().iter().all(|s| self.servers[s.as_str()].gates.complete(now));
        if done {
            self.current = change.next.clone();
            self.change = None;
            self.moves += 1;
        }
    }

    fn check(&self) -> Result<(), String> {
        for k in 0..KEYS {
            let k = key(k);
            let holders: Vec<&String> =
                self.servers.iter().filter(|(_, s)| self.live(s, &k)).map(|(n, _)| n).collect();
            if holders.len() > 1 {
                return Err(format!("{k} is live on {holders:?} at t={}", self.now));
            }
        }
        Ok(())
    }
}

fn run(actions: &[Action], sabotage: bool) -> (Result<(), String>, usize, usize) {
    let mut w = World::new(sabotage);
    for a in actions {
        if let Err(e) = w.step(a) {
            return (Err(e), w.grants, w.moves);
        }
    }
    (Ok(()), w.grants, w.moves)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_key_is_held_twice_and_fences_only_grow(actions in proptest::collection::vec(action(), 1..300)) {
        let (result, _, _) = run(&actions, false);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// The model does move keys and grant them (the property above is not vacuous), and without
/// the gates it finds two holders of a key.
#[test]
fn the_model_moves_keys_and_the_gates_are_what_keeps_it_safe() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = proptest::collection::vec(action(), 200..300);
    let (mut grants, mut moves, mut sabotaged_violations) = (0, 0, 0);
    for _ in 0..500 {
        let actions = strategy.new_tree(&mut runner).unwrap().current();
        let (ok, g, m) = run(&actions, false);
        assert!(ok.is_ok(), "{}", ok.unwrap_err());
        grants += g;
        moves += m;
        if run(&actions, true).0.is_err() {
            sabotaged_violations += 1;
        }
    }
    eprintln!("{grants} grants, {moves} map changes, {sabotaged_violations} sabotaged runs with a violation");
    assert!(grants > 5_000, "only {grants} grants");
    assert!(moves > 50, "only {moves} completed map changes");
    assert!(sabotaged_violations > 10, "the sabotaged model found {sabotaged_violations} violations");
}
