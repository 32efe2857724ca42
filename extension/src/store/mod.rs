//! The lease table, `dlock_internal.lease`: the lock cycle's two hot statements go straight to
//! the heap and index (`direct`) when the table is exactly as dlock made it, everything else
//! (and those, whenever anything is unusual) through SQL (`statements`); plus which commits
//! need a WAL flush (`durability`) and how the table stays small (`sweep`).

mod direct;
pub mod durability;
pub mod relation;
pub mod row;
mod statements;
pub mod sweep;

use crate::pg::spi::Spi;
use dlock_core::Timestamp;
use dlock_core::lease::Kind;

pub use row::NewLease;
pub use statements::{
    all, decrement, delete, keys_of_owner, reenter, session_bound_keys, set_expiry, waiters,
};

/// Every row of `key`, in fence order: directly from the table when it can, else by SQL.
pub fn read(spi: &Spi, key: &str) -> Vec<dlock_core::lease::Lease> {
    direct::read(key, None).unwrap_or_else(|direct::Fallback| statements::read(spi, key))
}

/// The rows of `key` that `owner` holds (at most one). On a hot key this reads only the owner's
/// index entries, not the dead ones every hand-off leaves until the waiters' snapshots let them
/// go.
pub fn read_own(spi: &Spi, key: &str, owner: &str) -> Vec<dlock_core::lease::Lease> {
    direct::read(key, Some(owner)).unwrap_or_else(|direct::Fallback| {
        statements::read(spi, key).into_iter().filter(|l| l.owner == owner).collect()
    })
}

/// Writes a new lease if its key has no row; the fence, or `None` when there is one. Directly
/// on the table when it can, else by SQL.
pub fn try_grant(spi: &Spi, new: &NewLease) -> Option<i64> {
    direct::try_insert(new, direct::Unless::KeyHasRows)
        .unwrap_or_else(|direct::Fallback| statements::try_grant(spi, new))
}

/// Writes a lease the caller decided to grant (other owners' rows, if any, stay as they are);
/// its fence. Straight to the table unless a row of the same owner is to be replaced.
pub fn grant(spi: &Spi, new: &NewLease) -> i64 {
    match direct::try_insert(new, direct::Unless::OwnerHasRow) {
        Ok(Some(fence)) => fence,
        Ok(None) | Err(direct::Fallback) => statements::grant(spi, new),
    }
}

/// Deletes a live TTL lease with one hold left, if `owner` and `role` hold it (and it is of
/// kind `only`, if given); the kind of the lease it deleted. Directly on the table when it can,
/// else by SQL.
pub fn release_last_hold(
    spi: &Spi,
    key: &str,
    owner: &str,
    role: u32,
    now: Timestamp,
    only: Option<Kind>,
) -> Option<Kind> {
    direct::delete_last_hold(key, owner, role, now, only)
        .unwrap_or_else(|direct::Fallback| statements::release_last_hold(spi, key, owner, role, now, only))
}

/// (key, owner) of the rows on a random heap page whose TTL and lock-delay ran out by `now`:
/// directly on the table when it can, else by SQL (`n` picks the page).
pub fn expired_on_random_page(spi: &Spi, n: u32, now: Timestamp) -> Vec<(String, String)> {
    let pick = |pages: i64| (pages > 0).then(|| i64::from(n) % pages);
    let keys = match direct::Pages::open() {
        Ok(table) => {
            let keys = pick(table.count()).map(|page| table.expired_on(page, now));
            table.close();
            keys
        }
        Err(direct::Fallback) => pick(statements::page_count(spi)).map(|page| {
            crate::pg::guc::nested(|| statements::expired_on_page_without_seqscan(spi, page, now))
        }),
    };
    keys.unwrap_or_default()
}

/// (election, term, expires_at) of every election's leader with a TTL, live or expired:
/// directly from the table when it can (the election watch then runs no SQL at all), else by
/// SQL.
pub fn leaders(spi: &Spi) -> Vec<(String, i64, Timestamp)> {
    match direct::Pages::open() {
        Ok(table) => {
            let leaders = table.leaders();
            table.close();
            leaders
        }
        Err(direct::Fallback) => statements::leaders(spi),
    }
}
