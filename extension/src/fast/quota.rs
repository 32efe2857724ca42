//! Fair shares of fast mode's table: how many entries each role and each database holds, so
//! that one tenant cannot take the cluster-wide table from the others. Every entry is counted
//! against the role that took it and its database from the moment it is entered until it is
//! removed (released, or swept once expired), and a new entry is refused (53400) when either
//! would pass its share: `dlock.fast_max_leases_per_role` (cluster-wide) and
//! `dlock.fast_max_leases_per_database`, by default half the table each.
//!
//! The counts live in a small shared hash table under a lock of their own, taken only while
//! holding a partition lock (or all of them, when sweeping), never the other way round: the
//! table reaches `charge` and `refund` only through a partition's `Books` or in `sweep`
//! (`lease_table.rs`), and `held_by_database` (a reading for the stats) holds no other lock. The
//! counts themselves are reached only through [`Counts`], which only
//! `Quotas::locked` makes, holding their lock.

use dlock_core::Share;
use pgrx::pg_sys;
use std::marker::PhantomData;

const ROLE: u64 = 1 << 32;
const DATABASE: u64 = 2 << 32;

#[repr(C)]
struct Count {
    /// `ROLE | oid` or `DATABASE | oid`.
    key: u64,
    held: i64,
}

/// The counts, set up at server start.
pub(super) struct Quotas {
    hash: *mut pg_sys::HTAB,
    lock: *mut pg_sys::LWLock,
}

/// Shared memory for the counts of a table of `capacity` entries.
pub(super) fn size(capacity: usize) -> usize {
    // SAFETY: a size computation.
    unsafe { pg_sys::hash_estimate_size(slots(capacity), std::mem::size_of::<Count>()) }
}

/// Every entry counts one role and one database, so there are never more counts than this.
fn slots(capacity: usize) -> i64 {
    2 * capacity as i64 + 2
}

impl Quotas {
    /// Sets the counts up (the table's startup), guarded by `lock`.
    pub(super) fn startup(capacity: usize, lock: *mut pg_sys::LWLock) -> Quotas {
        // SAFETY: runs in the postmaster (and again after a crash restart), before any backend.
        unsafe {
            let mut info: pg_sys::HASHCTL = std::mem::zeroed();
            info.keysize = std::mem::size_of::<u64>();
            info.entrysize = std::mem::size_of::<Count>();
            let hash = pg_sys::ShmemInitHash(
                c"dlock v2 fast shares".as_ptr(),
                slots(capacity),
                slots(capacity),
                &mut info,
                (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS) as i32,
            );
            Quotas { hash, lock }
        }
    }

    /// Runs `f` on the counts under their lock (`f` never errors out).
    fn locked<R>(&self, f: impl FnOnce(&mut Counts<'_>) -> R) -> R {
        // SAFETY: the counts' own LWLock, released below: `f` is plain field work.
        unsafe { pg_sys::LWLockAcquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        let result = f(&mut Counts { hash: self.hash, _held: PhantomData });
        // SAFETY: taken above.
        unsafe { pg_sys::LWLockRelease(self.lock) };
        result
    }

    /// Counts one more entry for `role` in `database`, unless either is at its share.
    pub(super) fn charge(&self, role: u32, database: u32, capacity: usize) -> Result<(), Share> {
        let (role_max, database_max) = crate::settings::fast_shares(capacity);
        self.locked(|c| {
            let role_held = c.held(ROLE | u64::from(role));
            if role_held >= role_max {
                return Err(Share::Role { held: role_held, max: role_max });
            }
            let database_held = c.held(DATABASE | u64::from(database));
            if database_held >= database_max {
                return Err(Share::Database { held: database_held, max: database_max });
            }
            c.add(ROLE | u64::from(role), 1);
            c.add(DATABASE | u64::from(database), 1);
            Ok(())
        })
    }

    /// How many entries `database` holds (live, or expired and not yet swept or taken over).
    pub(super) fn held_by_database(&self, database: u32) -> i64 {
        self.locked(|c| c.held(DATABASE | u64::from(database)))
    }

    /// One entry of `role` in `database` fewer.
    pub(super) fn refund(&self, role: u32, database: u32) {
        self.locked(|c| {
            c.add(ROLE | u64::from(role), -1);
            c.add(DATABASE | u64::from(database), -1);
        });
    }
}

/// The counts while this backend holds their lock: made only by `Quotas::locked`, for the
/// length of its closure.
struct Counts<'q> {
    hash: *mut pg_sys::HTAB,
    /// Borrows the counts for as long as the lock is held.
    _held: PhantomData<&'q mut Count>,
}

impl Counts<'_> {
    /// The count of `key` (`HASH_FIND`, or `HASH_ENTER_NULL`: a new one starts at 0).
    fn count(&mut self, key: u64, action: pg_sys::HASHACTION::Type) -> Option<&mut Count> {
        let mut found = false;
        // SAFETY: the shared table, searched under the counts' lock (`self`), which is borrowed
        // for as long as the count.
        unsafe {
            let entry = pg_sys::hash_search(
                self.hash,
                &key as *const u64 as *const std::ffi::c_void,
                action,
                &mut found,
            ) as *mut Count;
            let entry = entry.as_mut()?;
            if !found {
                entry.held = 0;
            }
            Some(entry)
        }
    }

    /// Takes the count of `key` out.
    fn remove(&mut self, key: u64) {
        // SAFETY: the shared table, changed under the counts' lock (`self`); the entry removed
        // is not looked at.
        unsafe {
            pg_sys::hash_search(
                self.hash,
                &key as *const u64 as *const std::ffi::c_void,
                pg_sys::HASHACTION::HASH_REMOVE,
                std::ptr::null_mut(),
            );
        }
    }

    fn held(&mut self, key: u64) -> i64 {
        self.count(key, pg_sys::HASHACTION::HASH_FIND).map_or(0, |c| c.held)
    }

    fn add(&mut self, key: u64, delta: i64) {
        if let Some(c) = self.count(key, pg_sys::HASHACTION::HASH_ENTER_NULL) {
            c.held += delta;
            if c.held <= 0 {
                self.remove(key);
            }
        }
    }
}
