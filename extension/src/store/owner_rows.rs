//! Owner rows inserted, counted per bucket of key hashes in shared memory: what lets a grant
//! skip the scan of its key's rows. A session that scanned a key and found no owner row notes
//! the count of the key's bucket; while that count has not moved, no owner row of the key has
//! been inserted since, so the key row alone says whether the key is free (`direct.rs`).
//!
//! Every insert of an owner row through dlock counts first (`store::try_grant`, `store::grant`,
//! whichever path writes it), while holding the key lock in a mode that keeps an exclusive
//! grant of the key out until that transaction ends; the count is read under that exclusive
//! lock. A count never goes back (an insert rolled back only costs the bucket's sessions one
//! scan); a crash restart zeroes the counts when every session that noted one is gone. Without
//! preload nothing is counted and every grant scans. Rows written by anything but dlock's
//! functions (a superuser's `INSERT` into `dlock_internal.lease`) are not counted: the table is
//! dlock's own, like a catalog.

use crate::pg::shmem_cell::ShmemCell;
use std::sync::atomic::{AtomicU64, Ordering};

const BUCKETS: usize = 1024;

/// The counts in shared memory (unset without preload).
static COUNTS: ShmemCell<&'static [AtomicU64]> = ShmemCell::new();

fn bucket(key: &str) -> usize {
    (dlock_core::key::key_hash(key) % BUCKETS as u64) as usize
}

/// The count of `key`'s bucket (`None` without preload: nothing can be inferred).
pub fn count(key: &str) -> Option<u64> {
    COUNTS.get().map(|c| c[bucket(key)].load(Ordering::SeqCst))
}

/// An owner row of `key` is about to be inserted.
pub fn inserting(key: &str) {
    if let Some(c) = COUNTS.get() {
        c[bucket(key)].fetch_add(1, Ordering::SeqCst);
    }
}

/// Asks for the counts' memory (`hooks/shmem.rs`'s request hook).
pub fn request() {
    ShmemCell::<&[AtomicU64]>::request(BUCKETS);
}

/// Sets the counts up, all zero (`hooks/shmem.rs`'s startup hook; after a crash restart too).
pub fn startup() {
    // SAFETY: the startup hook, with the length asked for.
    unsafe { COUNTS.attach(c"dlock v3 owner row counts", BUCKETS) };
}
