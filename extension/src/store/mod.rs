//! The lease table, `dlock_internal.lease`: a key row per key that outlives its leases, written
//! over in place by the lock cycle, and owner rows for shared leases and for grants to waiters
//! (`row.rs`). The lock cycle goes straight to the heap and index (`direct`) when the table is
//! exactly as dlock made it, everything else (and the cycle too, whenever anything is unusual)
//! through SQL (`statements`); plus which commits need a WAL flush (`durability`) and how the
//! table stays small (`sweep`).

mod direct;
pub mod durability;
pub mod owner_rows;
pub mod relation;
pub mod row;
mod statements;
pub mod sweep;

use crate::pg::spi::Spi;
use dlock_core::Timestamp;
use dlock_core::lease::Kind;

pub use row::{Deleted, NewLease, Slot, Stored};
pub use statements::{all, decrement, free, interval, keys_of_owner, reenter, set_expiry, waiters};

/// Raises the lease table as corrupted (XX001): a row says `what` dlock never writes.
fn corrupted(what: String) -> ! {
    crate::pg::report::raise(dlock_core::DlockError::Corrupted { what }, "dlock")
}

/// The leases of `key`, in fence order: directly from the table when it can, else by SQL.
pub fn read(spi: &Spi, key: &str) -> Vec<dlock_core::lease::Lease> {
    direct::read(key, None).unwrap_or_else(|direct::Fallback| statements::read(spi, key))
}

/// `owner`'s lease of `key`, if any (a vector of at most one). On a busy key this reads only
/// the owner's row and the key row, not the dead index entries every hand-off leaves until the
/// waiters' snapshots let them go.
pub fn read_own(spi: &Spi, key: &str, owner: &str) -> Vec<dlock_core::lease::Lease> {
    direct::read(key, Some(owner)).unwrap_or_else(|direct::Fallback| statements::read_own(spi, key, owner))
}

/// Writes a new lease into `slot` if no row of its key holds a lease; the fence, or `None` when
/// one does. Directly on the table when it can, else by SQL.
pub fn try_grant(spi: &Spi, new: &NewLease, slot: Slot) -> Option<i64> {
    if slot == Slot::Owner {
        owner_rows::inserting(new.key);
    }
    direct::try_grant(new, slot).unwrap_or_else(|direct::Fallback| statements::try_grant(spi, new, slot))
}

/// Writes a lease the caller decided to grant into `slot` (over a lease that is over there, if
/// any); its fence. Directly on the table when it can, else by SQL.
pub fn grant(spi: &Spi, new: &NewLease, slot: Slot) -> i64 {
    if slot == Slot::Owner {
        owner_rows::inserting(new.key);
    }
    direct::grant(new, slot).unwrap_or_else(|direct::Fallback| statements::grant(spi, new, slot))
}

/// Frees the last hold of a live TTL lease of `owner` and `role` (of kind `only`, if given):
/// the kind of the lease it freed. Directly on the table when it can, else by SQL.
pub fn release_last_hold(
    spi: &Spi,
    key: &str,
    owner: &str,
    role: u32,
    now: Timestamp,
    only: Option<Kind>,
) -> Option<Kind> {
    direct::release_last_hold(key, owner, role, now, only)
        .unwrap_or_else(|direct::Fallback| statements::release_last_hold(spi, key, owner, role, now, only))
}

/// Deletes the row of `key` and `holder` if `due` holds of it as it is now (the caller holds the
/// key's lock): what it deleted. Directly on the table when it can, else by SQL.
pub fn delete_row_if(spi: &Spi, key: &str, holder: &str, due: impl Fn(&Stored) -> bool) -> Option<Deleted> {
    direct::delete_row_if(key, holder, &due).unwrap_or_else(|direct::Fallback| {
        let row = statements::row_of(spi, key, holder).filter(|row| due(row))?;
        let lease = (row.hold_count > 0)
            .then(|| statements::read(spi, key).into_iter().find(|l| Some(&l.owner) == row.owner.as_ref()))
            .flatten();
        statements::delete_row(spi, key, holder);
        Some(Deleted { lease })
    })
}

/// The rows of a random heap page (`n` picks the page), whose free space the free space map
/// then knows: directly on the table when it can, else by SQL.
pub fn rows_on_random_page(spi: &Spi, n: u32) -> Vec<Stored> {
    let pick = |pages: i64| (pages > 0).then(|| i64::from(n) % pages);
    let rows = match direct::Pages::open() {
        Ok(table) => {
            let rows = pick(table.count()).map(|page| {
                let rows = table.rows_on(page);
                table.record_free_space(page);
                rows
            });
            table.close();
            rows
        }
        Err(direct::Fallback) => pick(statements::page_count(spi))
            .map(|page| crate::pg::guc::nested(|| statements::rows_on_page_without_seqscan(spi, page))),
    };
    rows.unwrap_or_default()
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
