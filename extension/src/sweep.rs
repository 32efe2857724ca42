//! Keeps the lease table small. Released leases are deleted on release; what remains are leases
//! that ran out and session-bound leases whose session ended without releasing. Grants reap
//! a few of those as they go (four per grant on average), so dead rows can never outgrow the
//! grants that created them, and no background worker is needed.

use crate::current::{classify, now};
use crate::keylock;
use crate::lease::{Current, Timestamp};
use crate::session;
use crate::spi::Spi;
use crate::store;
use pgrx::pg_sys;
use std::cell::RefCell;

/// One grant in this many (at random, so short-lived sessions do their share too) reaps up to
/// `EXPIRED_BATCH` expired rows: four per grant on average, so a backlog shrinks, for one index
/// probe per 16 grants.
const EXPIRED_ONE_IN: u32 = 16;
const EXPIRED_BATCH: i64 = 64;
/// One grant in this many looks at a batch of session-bound rows for dead sessions.
const SESSION_SCAN_ONE_IN: u32 = 1024;
const SESSION_SCAN_BATCH: i64 = 32;

thread_local! {
    /// Where the last scan of session-bound rows stopped (key order), so scans take turns.
    static SESSION_CURSOR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Called after a grant, inside the same transaction.
pub fn after_grant(spi: &Spi, now: Timestamp) {
    // SAFETY: the backend's own PRNG state.
    let n = unsafe { pg_sys::pg_prng_uint32(&raw mut pg_sys::pg_global_prng_state) };
    if n % EXPIRED_ONE_IN == 0 {
        for key in store::expired_keys(spi, now, EXPIRED_BATCH) {
            reap(spi, &key, now);
        }
    }
    if n % SESSION_SCAN_ONE_IN == 0 {
        let after = SESSION_CURSOR.with(|c| c.borrow().clone());
        let batch = store::session_bound_keys(spi, &after, SESSION_SCAN_BATCH);
        let next = if (batch.len() as i64) < SESSION_SCAN_BATCH {
            String::new()
        } else {
            batch.last().map(|(k, _)| k.clone()).unwrap_or_default()
        };
        for (key, fence) in batch {
            if !session::holder_alive(fence) {
                reap(spi, &key, now);
            }
        }
        SESSION_CURSOR.with(|c| *c.borrow_mut() = next);
    }
}

/// Deletes the row of `key` if its lease is dead and nobody is working on the key right now.
/// Keeps the key lock to commit after a delete, like any other change.
fn reap(spi: &Spi, key: &str, since: Timestamp) {
    let hash = keylock::key_hash(key);
    if !keylock::try_lock_key(hash) {
        return;
    }
    let row = store::read(spi, key);
    let now = now().max(since);
    match classify(row.as_ref(), now) {
        Current::Dead => store::delete(spi, key),
        _ => keylock::unlock_key(hash),
    }
}
