//! The counters in shared memory: a slot per database (claimed by its first counted event, kept
//! until the server stops), each a set of atomics that backends add to without a lock. When
//! every slot is taken, further databases share one last slot, shown without a database.

use super::{COUNTERS, Counter, WAIT_BUCKETS_MS};
use crate::pg::backend;
use crate::pg::shmem_cell::ShmemCell;
use dlock_core::Timestamp;
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Databases with slots of their own; one more slot is shared by any others.
const DATABASES: usize = 128;
/// The shared slot's database (no real database has this OID).
const OTHERS: u32 = u32::MAX;
const BUCKETS: usize = WAIT_BUCKETS_MS.len() + 1;

#[repr(C)]
#[derive(bytemuck::Zeroable)]
struct Slot {
    /// The database's OID, `0` while the slot is free.
    database: AtomicU32,
    /// When the counts started (server start, or the last reset).
    since: AtomicI64,
    counters: [AtomicU64; COUNTERS.len()],
    /// Waits per bucket of `WAIT_BUCKETS_MS` (the last: longer), their total in microseconds.
    buckets: [AtomicU64; BUCKETS],
    wait_us: AtomicU64,
}

/// A slot per database, and the shared one.
const SLOT_COUNT: usize = DATABASES + 1;

/// The slots in shared memory (unset without preload).
static SLOTS: ShmemCell<&'static [Slot]> = ShmemCell::new();

thread_local! {
    /// This backend's slot (a backend never changes database).
    static MINE: Cell<Option<&'static Slot>> = const { Cell::new(None) };
}

fn slots() -> Option<&'static [Slot]> {
    SLOTS.get().copied()
}

/// Whether counts are kept (preloaded, and this is dlock's first library in the process).
pub fn enabled() -> bool {
    slots().is_some() && !crate::pg::loaded::is_second_library() && crate::settings::track_stats()
}

/// This database's slot, claimed on first use.
fn mine() -> Option<&'static Slot> {
    if !enabled() {
        return None;
    }
    if let Some(cached) = MINE.with(Cell::get) {
        return Some(cached);
    }
    let slot = slot_of(backend::database().to_u32())?;
    MINE.with(|m| m.set(Some(slot)));
    Some(slot)
}

/// The slot of `database`, claimed if it has none.
fn slot_of(database: u32) -> Option<&'static Slot> {
    let slots = slots()?;
    let slot = slots[..DATABASES]
        .iter()
        .find(|s| s.database.load(Ordering::Acquire) == database)
        .or_else(|| {
            // A free slot (or one another backend of this database claimed meanwhile).
            slots[..DATABASES].iter().find(|s| {
                s.database.compare_exchange(0, database, Ordering::AcqRel, Ordering::Acquire).is_ok()
                    || s.database.load(Ordering::Acquire) == database
            })
        })
        .unwrap_or(&slots[DATABASES]);
    Some(slot)
}

/// Adds `n` to `counter` of `database`.
pub fn add_to(database: u32, counter: Counter, n: u64) {
    if enabled()
        && let Some(slot) = slot_of(database)
    {
        slot.counters[counter as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// Adds `n` to `counter` of this database.
pub fn add(counter: Counter, n: u64) {
    if let Some(slot) = mine() {
        slot.counters[counter as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// Records one wait of `us` microseconds in this database's histogram.
pub fn add_wait(us: i64) {
    let Some(slot) = mine() else { return };
    let ms = us as f64 / 1000.0;
    let bucket = WAIT_BUCKETS_MS.iter().position(|&le| ms <= le).unwrap_or(WAIT_BUCKETS_MS.len());
    slot.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    slot.wait_us.fetch_add(us.max(0) as u64, Ordering::Relaxed);
}

/// One database's counts, read at once (each value atomically, not the set).
pub struct Snapshot {
    /// `None`: the slot shared by databases beyond the first `DATABASES`.
    pub database: Option<u32>,
    pub since: Timestamp,
    pub counters: [u64; COUNTERS.len()],
    pub buckets: [u64; BUCKETS],
    pub wait_us: u64,
}

/// The counts of every database that has any.
pub fn snapshot() -> Vec<Snapshot> {
    let Some(slots) = slots() else { return Vec::new() };
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let database = if i == DATABASES { OTHERS } else { s.database.load(Ordering::Acquire) };
            let counters: [u64; COUNTERS.len()] =
                std::array::from_fn(|c| s.counters[c].load(Ordering::Relaxed));
            let buckets: [u64; BUCKETS] = std::array::from_fn(|b| s.buckets[b].load(Ordering::Relaxed));
            let used =
                database != 0 && (database != OTHERS || counters.iter().chain(&buckets).any(|&n| n > 0));
            used.then(|| Snapshot {
                database: (database != OTHERS).then_some(database),
                since: s.since.load(Ordering::Acquire),
                counters,
                buckets,
                wait_us: s.wait_us.load(Ordering::Relaxed),
            })
        })
        .collect()
}

/// Sets this database's counts back to zero.
pub fn reset() {
    if let Some(slot) = mine() {
        for c in slot.counters.iter().chain(&slot.buckets) {
            c.store(0, Ordering::Relaxed);
        }
        slot.wait_us.store(0, Ordering::Relaxed);
        slot.since.store(backend::now(), Ordering::Release);
    }
}

/// Asks for the counters' memory (`hooks/shmem.rs`).
pub fn request() {
    ShmemCell::<&[Slot]>::request(SLOT_COUNT);
}

/// Sets the counters up, all zero (zero counts, free slots), counting from now
/// (`hooks/shmem.rs`; after a crash restart too).
pub fn startup() {
    // SAFETY: the startup hook, with the length asked for.
    if unsafe { SLOTS.attach(c"dlock v2 stats", SLOT_COUNT) } {
        let now = backend::now();
        for slot in slots().into_iter().flatten() {
            slot.since.store(now, Ordering::Relaxed);
        }
    }
}
