//! Elections: a campaign is an acquire of the election's key as its leader (`ops/acquire.rs`,
//! `Kind::Leader`), whose grant tells the election's watchers; this reads who leads, and tells
//! the watchers when a leader's lease expires with nobody to take over, which no call of any
//! session would: a background worker per database does (`elections/worker.rs`), started
//! at the commit of a leader's grant with a TTL (`elections/worker_start.rs`) and ending once no such
//! leader is left.

use crate::locks::liveness;
use crate::locks::watchers;
use crate::pg::backend::now;
use crate::pg::spi;
use crate::store;
use dlock_core::Timestamp;
use dlock_core::key::key_hash;
use dlock_core::lease::Lease;
use std::collections::HashMap;

/// The live leader of `election`, as committed now (no lock: a read).
pub fn leader(election: &str) -> Option<Lease> {
    let now = now();
    let rows = spi::connect(|spi| store::read(spi, election));
    liveness::state(&rows, now).leader().cloned()
}

/// One round of the worker: notifies the watchers of every election whose leader's lease ran
/// out (once per term: `announced` remembers election -> term); the next expiry to wake for,
/// and whether any leader with a TTL is left.
pub fn announce_expired(announced: &mut HashMap<String, i64>) -> (Option<Timestamp>, bool) {
    let now = now();
    let leaders = spi::connect(store::leaders);
    let mut next = None::<Timestamp>;
    for (election, term, expires_at) in &leaders {
        if *expires_at > now {
            next = Some(next.map_or(*expires_at, |n| n.min(*expires_at)));
        } else if announced.get(election) != Some(term) {
            let hash = key_hash(election);
            if watchers::is_watched(hash) {
                watchers::notify(hash);
            }
            announced.insert(election.clone(), *term);
        }
    }
    announced.retain(|election, term| leaders.iter().any(|(e, t, _)| e == election && t == term));
    (next, !leaders.is_empty())
}
