//! Fast mode's table in shared memory: its settings, the partitioned hash of entries, the
//! partition locks, the waiters' slots, the lock-delay's start and the fence epochs.
//!
//! A key's entry and the waiters' slots are reached only through a [`Partition`], which only
//! [`Table::locked`] makes, holding the key's partition lock; the fair shares only through its
//! [`Books`] (or in `sweep`, holding every partition lock), so their lock is always taken under
//! a partition lock. Every partition at once is reached only by `scan` and `sweep`, which take
//! every partition lock themselves.

use crate::fast::epoch;
use crate::pg::backend;
use crate::pg::shmem_cell::ShmemCell;
use dlock_core::key::key_hash;
use dlock_core::{DlockError, Micros, Share, Timestamp};
use pgrx::pg_sys;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use super::quota::{self, Quotas};
use super::wait_lines::{Line, Slots, Waiters};

use dlock_core::limits::{MAX_FAST_KEY_BYTES as MAX_KEY_BYTES, MAX_FAST_OWNER_BYTES as MAX_OWNER_BYTES};

const PARTITIONS: usize = 16;
const TRANCHE: &CStr = c"dlock v2 fast";
use epoch::{COUNTER_BITS, COUNTER_MARGIN, COUNTER_MAX};

#[repr(C)]
pub(super) struct Entry {
    /// The hash table's key: the key's 64-bit hash.
    pub(super) hash: u64,
    pub(super) database: u32,
    pub(super) key_len: u16,
    pub(super) owner_len: u16,
    pub(super) role: u32,
    pub(super) hold_count: i32,
    pub(super) fence: i64,
    pub(super) expires_at: Timestamp,
    /// The key's line of waiters (`wait_lines.rs`).
    pub(super) line: Line,
    pub(super) key: [u8; MAX_KEY_BYTES],
    pub(super) owner: [u8; MAX_OWNER_BYTES],
}

impl Entry {
    pub(super) fn owner(&self) -> &[u8] {
        &self.owner[..self.owner_len as usize]
    }
}

#[repr(C)]
pub(super) struct Shared {
    /// When this server's shared memory was set up: the lock-delay starts here.
    pub(super) started_at: Timestamp,
    /// `epoch << COUNTER_BITS | n` of the last fence handed out (epoch 0: none drawn yet).
    pub(super) fence: AtomicU64,
    /// Entries in the hash table, live or expired (expired ones are reused or swept; released
    /// ones are removed at once).
    pub(super) entries: AtomicU32,
    /// No entry expires before this (a lower bound, lowered by grants and renewals under their
    /// partition lock, and set exactly by a sweep): while it lies ahead, nothing is expired and
    /// a refused request has nothing to sweep.
    pub(super) next_expiry: AtomicI64,
}

/// Where the table lies: set up by the postmaster, then never changed.
pub(super) struct Table {
    shared: &'static Shared,
    hash: *mut pg_sys::HTAB,
    /// PARTITIONS partition locks, then the epoch lock and the shares' lock.
    locks: *mut pg_sys::LWLockPadded,
    quotas: Quotas,
    /// The waiters' slots and lines (`wait_lines.rs`): which slot is ours, and waking one; their
    /// contents are a `Partition`'s.
    pub(super) waiters: Slots,
}

// SAFETY: the pointers are never changed after startup, and what they point to (shared memory)
// is only reached under PostgreSQL's LWLocks: through `Partition`, `Quotas::locked`, `scan` and
// `sweep` (and `Shared`'s atomics). A backend is one thread (LWLocks are held per process), and
// dlock starts no other.
unsafe impl Sync for Table {}

/// The epoch lock's index in the tranche; the shares' lock comes after it.
const EPOCH_LOCK: usize = PARTITIONS;
const QUOTA_LOCK: usize = PARTITIONS + 1;

/// The table, set up by the postmaster (unset without preload).
static TABLE: ShmemCell<Table> = ShmemCell::new();

pub(super) fn capacity() -> usize {
    crate::settings::fast_max_leases()
}

/// `dlock.fast_max_ttl` in microseconds.
pub fn max_ttl_us() -> Micros {
    crate::settings::fast_max_ttl_us()
}

/// Asks for the table's memory and locks (`shmem.rs`'s request hook).
pub fn request() {
    // SAFETY: the postmaster's shared memory request phase.
    unsafe {
        let entries = pg_sys::hash_estimate_size(capacity() as i64, std::mem::size_of::<Entry>());
        pg_sys::RequestAddinShmemSpace(
            std::mem::size_of::<Shared>() + entries + quota::size(capacity()) + Slots::size(),
        );
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), QUOTA_LOCK as i32 + 1);
    }
}

/// Sets the table up (`shmem.rs`'s startup hook).
pub fn startup() {
    // SAFETY: runs in the postmaster (and again after a crash restart), before any backend: the
    // structs are ours alone, sized as `request` asked, and `Shared` is initialised before it is
    // referenced; shared memory lasts as long as the backends that read the table.
    let table = unsafe {
        let mut found = false;
        let shared = pg_sys::ShmemInitStruct(
            c"dlock v2 fast state".as_ptr(),
            std::mem::size_of::<Shared>(),
            &mut found,
        ) as *mut Shared;
        if !found {
            std::ptr::addr_of_mut!((*shared).started_at).write(pg_sys::GetCurrentTimestamp());
            std::ptr::addr_of_mut!((*shared).fence).write(AtomicU64::new(0));
            std::ptr::addr_of_mut!((*shared).entries).write(AtomicU32::new(0));
            std::ptr::addr_of_mut!((*shared).next_expiry).write(AtomicI64::new(Timestamp::MAX));
        }
        let mut slots_found = false;
        let slots =
            pg_sys::ShmemInitStruct(c"dlock v2 fast waiters".as_ptr(), Slots::size(), &mut slots_found);
        let waiters = Slots::startup(slots as *mut u8, slots_found);
        let mut info: pg_sys::HASHCTL = std::mem::zeroed();
        info.keysize = std::mem::size_of::<u64>();
        info.entrysize = std::mem::size_of::<Entry>();
        info.num_partitions = PARTITIONS as i64;
        let hash = pg_sys::ShmemInitHash(
            c"dlock v2 fast leases".as_ptr(),
            capacity() as i64,
            capacity() as i64,
            &mut info,
            (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS | pg_sys::HASH_PARTITION) as i32,
        );
        let locks = pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr());
        let quotas = Quotas::startup(capacity(), &mut (*locks.add(QUOTA_LOCK)).lock);
        Table { shared: &*shared, hash, locks, quotas, waiters }
    };
    // One descriptor leaked per server start, crash restarts included.
    TABLE.set(Box::leak(Box::new(table)));
}

/// The table, if dlock was preloaded.
pub(super) fn preloaded() -> Option<&'static Table> {
    TABLE.get()
}

/// The table for a fast-mode call: not without preload (55000), nor on a standby (25006).
pub(super) fn table() -> Result<&'static Table, DlockError> {
    if crate::pg::loaded::is_second_library() {
        return Err(DlockError::SecondLibrary);
    }
    let table = preloaded().ok_or(DlockError::NotPreloaded)?;
    // SAFETY: reads shared state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Err(DlockError::OnStandby);
    }
    Ok(table)
}

/// The key a call is about: its text, hash, and partition.
pub(super) struct Key<'a> {
    pub(super) text: &'a str,
    pub(super) database: u32,
    pub(super) hash: u64,
    pub(super) part: usize,
}

impl<'a> Key<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        let database = current_database();
        let hash = key_hash(text) ^ u64::from(database).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Key { text, database, hash, part: (hash as u32 as usize) % PARTITIONS }
    }

    /// Whether `entry` is this key's (and not one that shares its hash).
    pub(super) fn owns(&self, entry: &Entry) -> bool {
        entry.database == self.database && &entry.key[..entry.key_len as usize] == self.text.as_bytes()
    }
}

pub(super) fn current_database() -> u32 {
    backend::database().to_u32()
}

impl Table {
    fn lock(&self, index: usize) -> *mut pg_sys::LWLock {
        // SAFETY: the tranche has QUOTA_LOCK + 1 locks, and `index` names one of them.
        unsafe { &mut (*self.locks.add(index)).lock }
    }

    pub(super) fn shared(&self) -> &Shared {
        self.shared
    }

    /// Runs `f` on the partition of `key`, under its lock (`f` never errors out).
    pub(super) fn locked<R>(&self, key: &Key, f: impl FnOnce(&mut Partition<'_>) -> R) -> R {
        let lock = self.lock(key.part);
        // SAFETY: the key's partition lock, released below; LWLocks are released by the abort
        // path should anything in between fail.
        unsafe { pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        let result = f(&mut Partition {
            entries: Entries { hash: self.hash, key: key.hash, _held: PhantomData },
            // SAFETY: the partition lock is held until the partition is gone (below), and this is
            // its only `Waiters`.
            waiters: unsafe { self.waiters.locked() },
            books: Books { shared: self.shared, quotas: &self.quotas },
        });
        // SAFETY: taken above; the partition is gone.
        unsafe { pg_sys::LWLockRelease(lock) };
        result
    }

    /// How many entries `database` holds (live, or expired and not yet swept or taken over).
    pub(super) fn held_by_database(&self, database: u32) -> i64 {
        self.quotas.held_by_database(database)
    }

    /// The next fence, drawing a new epoch first when needed (never under a partition lock:
    /// drawing flushes WAL).
    pub(super) fn ensure_epoch(&self) {
        let state = self.shared().fence.load(Ordering::Acquire);
        if state >> COUNTER_BITS != 0 && state & COUNTER_MAX < COUNTER_MAX - COUNTER_MARGIN {
            return;
        }
        let epoch_lock = self.lock(EPOCH_LOCK);
        // SAFETY: the epoch lock serialises draws; drawing (a WAL insert, flush and wait for the
        // standbys) may error out, and the abort path releases the lock.
        unsafe {
            pg_sys::LWLockAcquire(epoch_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
            let state = self.shared().fence.load(Ordering::Acquire);
            if state >> COUNTER_BITS == 0 || state & COUNTER_MAX >= COUNTER_MAX - COUNTER_MARGIN {
                let epoch = epoch::draw();
                self.shared().fence.store(epoch << COUNTER_BITS, Ordering::Release);
            }
            pg_sys::LWLockRelease(epoch_lock);
        }
    }

    /// Runs `f` on every entry, holding every partition lock (shared); `f` must not fail.
    pub(super) fn scan(&self, mut f: impl FnMut(&Entry)) {
        // SAFETY: a scan of the shared table under all its partition locks.
        unsafe {
            for i in 0..PARTITIONS {
                pg_sys::LWLockAcquire(self.lock(i), pg_sys::LWLockMode::LW_SHARED);
            }
            let mut status: pg_sys::HASH_SEQ_STATUS = std::mem::zeroed();
            pg_sys::hash_seq_init(&mut status, self.hash);
            loop {
                let entry = pg_sys::hash_seq_search(&mut status) as *mut Entry;
                let Some(entry) = entry.as_ref() else { break };
                f(entry);
            }
            for i in (0..PARTITIONS).rev() {
                pg_sys::LWLockRelease(self.lock(i));
            }
        }
    }

    /// Clears every expired entry (all partition locks, in order) if any can have expired by
    /// `now`; how many it cleared. So a sweep happens only after some lease ran out or was
    /// renewed, however many requests are refused meanwhile: a refused request costs one read
    /// of `next_expiry`.
    pub(super) fn sweep(&self, now: Timestamp) -> usize {
        if self.shared().next_expiry.load(Ordering::Acquire) > now {
            return 0;
        }
        // SAFETY: holding every partition lock, the table may be scanned and changed.
        unsafe {
            for i in 0..PARTITIONS {
                pg_sys::LWLockAcquire(self.lock(i), pg_sys::LWLockMode::LW_EXCLUSIVE);
            }
            let mut dead = Vec::new();
            let mut next = Timestamp::MAX;
            let mut status: pg_sys::HASH_SEQ_STATUS = std::mem::zeroed();
            pg_sys::hash_seq_init(&mut status, self.hash);
            loop {
                let entry = pg_sys::hash_seq_search(&mut status) as *mut Entry;
                let Some(entry) = entry.as_ref() else { break };
                // An expired entry with waiters is theirs: the first takes it over.
                if entry.expires_at <= now && entry.line.is_empty() {
                    dead.push((entry.hash, entry.role, entry.database));
                } else {
                    next = next.min(entry.expires_at);
                }
            }
            for (hash, role, database) in &dead {
                crate::stats::count_for(*database, crate::stats::Counter::FastExpiries);
                pg_sys::hash_search_with_hash_value(
                    self.hash,
                    hash as *const u64 as *const std::ffi::c_void,
                    *hash as u32,
                    pg_sys::HASHACTION::HASH_REMOVE,
                    std::ptr::null_mut(),
                );
                self.quotas.refund(*role, *database);
            }
            self.shared().entries.fetch_sub(dead.len() as u32, Ordering::AcqRel);
            self.shared().next_expiry.store(next, Ordering::Release);
            for i in (0..PARTITIONS).rev() {
                pg_sys::LWLockRelease(self.lock(i));
            }
            dead.len()
        }
    }
}

impl Shared {
    /// A fresh fence, or `None` if this epoch ran out under us (draw another and retry). Never
    /// carries into the epoch bits: an epoch nobody drew could repeat one drawn later.
    fn next_fence(&self) -> Option<i64> {
        let fence = &self.fence;
        let mut current = fence.load(Ordering::Acquire);
        loop {
            if current >> COUNTER_BITS == 0 || current & COUNTER_MAX == COUNTER_MAX {
                return None;
            }
            match fence.compare_exchange_weak(current, current + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some((current + 1) as i64),
                Err(seen) => current = seen,
            }
        }
    }
}

/// The partition of one key while this backend holds its lock (exclusive): made only by
/// [`Table::locked`], for the length of its closure. In three parts, each borrowed on its own,
/// so that the key's entry, the waiters and the books can be changed at once.
pub(super) struct Partition<'p> {
    /// The key's entry.
    pub(super) entries: Entries<'p>,
    /// The waiters' slots (those waiting on this partition's keys, and our own).
    pub(super) waiters: Waiters<'p>,
    /// The entry count, the next expiry, the fences and the fair shares.
    pub(super) books: Books<'p>,
}

/// The entry of the key a [`Partition`] was locked for, in the shared hash table.
pub(super) struct Entries<'p> {
    hash: *mut pg_sys::HTAB,
    /// The key's hash: its hash-table key, and (truncated) its hash code.
    key: u64,
    /// Borrows the partition's entries for as long as its lock is held.
    _held: PhantomData<&'p mut Entry>,
}

impl Entries<'_> {
    /// Searches the shared table for the key (`action`); the entry, if any.
    fn search(&mut self, action: pg_sys::HASHACTION::Type) -> *mut Entry {
        // SAFETY: a shared partitioned table, searched with the hash code of its own key bytes
        // (always computed the same way, so lookups agree), under the key's partition lock
        // (`self`).
        unsafe {
            pg_sys::hash_search_with_hash_value(
                self.hash,
                &self.key as *const u64 as *const std::ffi::c_void,
                self.key as u32,
                action,
                std::ptr::null_mut(),
            ) as *mut Entry
        }
    }

    /// The key's entry, if it has one.
    pub(super) fn find(&mut self) -> Option<Found<'_>> {
        let entry = self.search(pg_sys::HASHACTION::HASH_FIND);
        // SAFETY: an entry of the table, ours to change under the partition lock while `self`
        // is borrowed.
        let entry = unsafe { entry.as_mut()? };
        Some(Found { entry, hash: self.hash, key: self.key })
    }

    /// A new entry for the key, which has none (`find`), set up by the caller but for its
    /// hash; `None` if shared memory ran out.
    pub(super) fn enter(&mut self) -> Option<&mut Entry> {
        let entry = self.search(pg_sys::HASHACTION::HASH_ENTER_NULL);
        // SAFETY: as in `find`.
        unsafe { entry.as_mut() }
    }
}

/// The key's entry, found: changed in place, or removed.
pub(super) struct Found<'e> {
    entry: &'e mut Entry,
    hash: *mut pg_sys::HTAB,
    key: u64,
}

impl Found<'_> {
    /// Removes the entry, giving its share back.
    pub(super) fn remove(self, books: &Books<'_>) {
        let (role, database) = (self.entry.role, self.entry.database);
        // SAFETY: as in `Entries::search`; the entry goes with `self`, never looked at again.
        unsafe {
            pg_sys::hash_search_with_hash_value(
                self.hash,
                &self.key as *const u64 as *const std::ffi::c_void,
                self.key as u32,
                pg_sys::HASHACTION::HASH_REMOVE,
                std::ptr::null_mut(),
            );
        }
        books.shared.entries.fetch_sub(1, Ordering::AcqRel);
        books.quotas.refund(role, database);
    }
}

impl Deref for Found<'_> {
    type Target = Entry;

    fn deref(&self) -> &Entry {
        self.entry
    }
}

impl DerefMut for Found<'_> {
    fn deref_mut(&mut self) -> &mut Entry {
        self.entry
    }
}

/// What a partition's holder keeps count of besides its entries: the table's shared atomics and
/// the fair shares, whose lock is taken here, under the partition lock.
pub(super) struct Books<'p> {
    pub(super) shared: &'p Shared,
    quotas: &'p Quotas,
}

impl Books<'_> {
    /// Notes that an entry now expires at `expires_at`.
    pub(super) fn expires(&self, expires_at: Timestamp) {
        self.shared.next_expiry.fetch_min(expires_at, Ordering::AcqRel);
    }

    /// A fresh fence, or `None` if this epoch ran out under us (draw another and retry).
    pub(super) fn next_fence(&self) -> Option<i64> {
        self.shared.next_fence()
    }

    /// Counts one more entry for `role` in `database`, unless either is at its share.
    pub(super) fn charge(&self, role: u32, database: u32) -> Result<(), Share> {
        self.quotas.charge(role, database, capacity())
    }

    /// One entry of `role` in `database` fewer.
    pub(super) fn refund(&self, role: u32, database: u32) {
        self.quotas.refund(role, database);
    }
}
