//! Keeps the lease table small. Released leases are deleted on release; what remains are leases
//! that ran out and session-bound leases whose session ended without releasing. Each acquire
//! that inserts a new key reaps a few of those, so dead rows can never outgrow the inserts
//! that created them, and no background worker is needed.

use crate::current::{classify, now};
use crate::keylock;
use crate::lease::{Current, Timestamp};
use crate::session;
use crate::spi::Spi;
use crate::store;
use std::cell::{Cell, RefCell};

/// Expired rows reaped per new key: more than one, so a backlog shrinks.
const EXPIRED_PER_INSERT: i64 = 4;
/// Every this many new keys, look at a batch of session-bound rows for dead sessions.
const SESSION_SCAN_EVERY: u32 = 64;
const SESSION_SCAN_BATCH: i64 = 32;

thread_local! {
    static INSERTS: Cell<u32> = const { Cell::new(0) };
    /// Where the last scan of session-bound rows stopped (key order), so scans take turns.
    static SESSION_CURSOR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Called after an acquire inserted a new key, inside the same transaction.
pub fn after_insert(spi: &Spi, now: Timestamp) {
    for key in store::expired_keys(spi, now, EXPIRED_PER_INSERT) {
        reap(spi, &key, now);
    }
    let n = INSERTS.with(|c| {
        c.set(c.get().wrapping_add(1));
        c.get()
    });
    if n % SESSION_SCAN_EVERY == 0 {
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
