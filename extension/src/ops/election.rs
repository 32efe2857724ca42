//! Elections: a campaign is an acquire of the election's key as its leader (`ops/acquire.rs`,
//! `Kind::Leader`), whose grant tells the election's watchers; this reads who leads.

use crate::locks::liveness;
use crate::pg::backend::now;
use crate::pg::spi;
use crate::store;
use dlock_core::lease::Lease;

/// The live leader of `election`, as committed now (no lock: a read).
pub fn leader(election: &str) -> Option<Lease> {
    let now = now();
    let rows = spi::connect(|spi| store::read(spi, election));
    liveness::state(&rows, now).leader().cloned()
}
