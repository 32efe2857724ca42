//! Keeps the lease table small. Released leases are deleted on release (and vacuumed as usual);
//! what remains are leases that ran out and session-bound leases whose session ended without
//! releasing. Grants reap those as they go, with no background worker and no index on expiry:
//! one autocommit grant in eight reads one random heap page (about 70 rows) and deletes the dead leases on
//! it. If a fraction `e` of the rows is dead, a grant removes about `9e` of them on average while
//! adding at most one, so dead rows settle below about a ninth of the table, never grow without
//! bound, and a backlog (a million leases that all ran out) drains at about nine per grant.
//!
//! Why not an index on `expires_at`: every acquire would pay for it, and a scan for "expired by
//! now" walks the index entries of every released-but-not-yet-vacuumed row whose expiry passed,
//! which under load grows faster than autovacuum clears it.

use crate::locks::key as keylock;
use crate::locks::liveness;
use crate::locks::session;
use crate::pg::backend::{at_autocommit_top_level, now};
use crate::pg::spi::Spi;
use crate::stats::{self, Counter};
use crate::store;
use dlock_core::Timestamp;
use dlock_core::key::key_hash;
use pgrx::pg_sys;
use std::cell::RefCell;

/// One grant in this many (at random, so short-lived sessions do their share too) sweeps a page.
const PAGE_SWEEP_ONE_IN: u32 = 8;
/// One grant in this many looks at a batch of session-bound rows for dead sessions.
const SESSION_SCAN_ONE_IN: u32 = 1024;
const SESSION_SCAN_BATCH: i64 = 32;

thread_local! {
    /// Where the last scan of session-bound rows stopped (key order), so scans take turns.
    static SESSION_CURSOR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Called after a grant, inside the same transaction. Only a grant at the top level of an
/// autocommit statement sweeps: a swept row's key stays locked until the sweeping transaction
/// ends, and a transaction block could keep every acquirer of that expired key waiting for as
/// long as it runs.
pub fn after_grant(spi: &Spi, now: Timestamp) {
    if !at_autocommit_top_level() {
        return;
    }
    // SAFETY: the backend's own PRNG state.
    let n = unsafe { pg_sys::pg_prng_uint32(&raw mut pg_sys::pg_global_prng_state) };
    if n % PAGE_SWEEP_ONE_IN == 0 {
        for (key, owner) in store::expired_on_random_page(spi, n / PAGE_SWEEP_ONE_IN, now) {
            reap(spi, &key, &owner, now);
        }
    }
    if n % SESSION_SCAN_ONE_IN == 0 {
        let after = SESSION_CURSOR.with(|c| c.borrow().clone());
        let batch = store::session_bound_keys(spi, &after, SESSION_SCAN_BATCH);
        let next = if (batch.len() as i64) < SESSION_SCAN_BATCH {
            String::new()
        } else {
            batch.last().map(|(k, _, _)| k.clone()).unwrap_or_default()
        };
        for (key, owner, fence) in batch {
            if !session::holder_alive(fence) {
                reap(spi, &key, &owner, now);
            }
        }
        SESSION_CURSOR.with(|c| *c.borrow_mut() = next);
    }
}

/// Deletes `owner`'s row of `key` if its lease is dead (and its lock-delay over) and nobody is
/// working on the key right now. Keeps the key lock to commit after a delete, like any other
/// change.
fn reap(spi: &Spi, key: &str, owner: &str, since: Timestamp) {
    let hash = key_hash(key);
    if !keylock::try_lock_key(hash) {
        return;
    }
    let now = now().max(since);
    let rows = store::read(spi, key);
    let dead = rows.iter().find(|l| l.owner == owner).filter(|lease| {
        !liveness::is_live(lease, now) && (lease.is_session_bound() || lease.delay_ends() <= now)
    });
    if let Some(lease) = dead {
        if lease.is_session_bound() {
            stats::count_at_commit(Counter::SessionEnds);
        } else {
            stats::expired(key, lease, now);
        }
        store::delete(spi, key, owner);
    } else {
        keylock::unlock_key(hash);
    }
}
