//! Keeps the lease table small. A key's row stays after its lease ends — released, expired, or
//! its session gone — so that the key's next grant writes over it in place; rows over for
//! longer than `dlock.sweep_after` go. Grants reap them as they go, with no background worker
//! and no index on expiry: a grant sweeps one random heap page for every row its backend added
//! to the table since its last sweep, and one grant in eight that added none sweeps one too
//! (expired leases of keys nobody takes again). A sweep deletes the rows on its page that are
//! over past the horizon (a session-bound lease whose session ended at once: nobody knows since
//! when).
//!
//! Why a page per added row: the table grows only by inserts, and a random page holds on
//! average `due rows / pages` rows that are due. So the due rows settle where a page holds
//! about one of them, and the table at about what the leases and the keys of the last
//! `dlock.sweep_after` need, whatever the churn of keys (a grant with one in eight settled at
//! eight due rows a page: more than a page holds at the table's fillfactor, so it never did).
//!
//! Why not an index on `expires_at`: every grant and release would update it (no more HOT
//! updates), and a scan for "over by now" walks the index entries of every dead version, which
//! under load grows faster than autovacuum clears it.

use crate::locks::key as keylock;
use crate::locks::session;
use crate::pg::backend::{at_autocommit_top_level, now};
use crate::pg::spi::Spi;
use crate::settings;
use crate::stats::{self, Counter};
use crate::store::{self, Stored};
use dlock_core::key::key_hash;
use dlock_core::{INFINITY, Timestamp};
use pgrx::pg_sys;
use std::cell::Cell;

/// One grant in this many that added no row (at random, so short-lived sessions do their share
/// too) sweeps a page.
const PAGE_SWEEP_ONE_IN: u32 = 8;
/// Most pages one grant sweeps: rows added in a transaction block are paid off by later grants,
/// a few at a time.
const MAX_PAGES_PER_GRANT: u32 = 4;

thread_local! {
    /// Rows this backend added to the table and has not yet swept a page for.
    static ROWS_ADDED: Cell<u32> = const { Cell::new(0) };
}

/// Called by the store when it inserts a row (rather than writing over one).
pub fn row_added() {
    ROWS_ADDED.with(|n| n.set(n.get().saturating_add(1)));
}

/// Called after a grant, inside the same transaction. Only a grant at the top level of an
/// autocommit statement sweeps: a swept row's key stays locked until the sweeping transaction
/// ends, and a transaction block could keep every acquirer of that key waiting for as long as
/// it runs.
pub fn after_grant(spi: &Spi, now: Timestamp) {
    if !at_autocommit_top_level() {
        return;
    }
    // SAFETY: the backend's own PRNG state.
    let random = || unsafe { pg_sys::pg_prng_uint32(&raw mut pg_sys::pg_global_prng_state) };
    let added = ROWS_ADDED.with(Cell::get);
    let pages =
        if added > 0 { added.min(MAX_PAGES_PER_GRANT) } else { u32::from(random() % PAGE_SWEEP_ONE_IN == 0) };
    ROWS_ADDED.with(|n| n.set(added - pages.min(added)));
    let horizon = settings::sweep_after_us();
    for _ in 0..pages {
        for row in store::rows_on_random_page(spi, random()) {
            if due(&row, now, horizon) {
                reap(spi, &row, horizon);
            }
        }
    }
}

/// Whether `row` is over and has been for `horizon` by `now`: free since it was released,
/// a TTL lease since it and its lock-delay ran out, or a session-bound lease whose session
/// ended (a look at its binding).
fn due(row: &Stored, now: Timestamp, horizon: i64) -> bool {
    let over_since = if row.hold_count <= 0 {
        row.expires_at
    } else if row.expires_at == INFINITY {
        return row.fence.is_some_and(|fence| !session::holder_alive(fence));
    } else {
        row.expires_at.saturating_add(row.lock_delay)
    };
    over_since.saturating_add(horizon) <= now
}

/// Deletes `row` if it is still due once its key is locked (nobody working on the key right
/// now), counting the lease it ended: an expiry, or a session that ended without releasing.
/// Keeps the key lock to commit after a delete, like any other change.
fn reap(spi: &Spi, seen: &Stored, horizon: i64) {
    let hash = key_hash(&seen.key);
    // With the sweep mark, held to commit beside the key lock: a try of this key waits for us
    // rather than answer busy.
    if !keylock::try_lock_key_for_sweep(hash) {
        return;
    }
    let now = now();
    let Some(deleted) = store::delete_row_if(spi, &seen.key, &seen.holder, |row| due(row, now, horizon))
    else {
        keylock::unlock_key_after_sweep(hash);
        return;
    };
    match deleted.lease {
        Some(lease) if lease.is_session_bound() => stats::count_at_commit(Counter::SessionEnds),
        Some(lease) => stats::expired(&seen.key, &lease, now),
        None => {}
    }
}
