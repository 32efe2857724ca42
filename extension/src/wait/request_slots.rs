//! The wait table's shared memory (preloaded only): `dlock.wait_slots` slots, a free list, and
//! each backend's slot by proc number, under one lock. What the slots mean is `requests.rs`'s.
//! Everything in it is reached through a [`Locked`], which only [`with_table`] makes, holding
//! the lock.

use crate::pg::shmem_cell::ShmemCell;
use dlock_core::limits::{MAX_KEY_BYTES, MAX_OWNER_BYTES};
use pgrx::pg_sys;
use std::ffi::CStr;
use std::marker::PhantomData;

const TRANCHE: &CStr = c"dlock v2 wait table";
/// No slot (in `by_proc`).
const NONE: i32 = -1;

pub(super) const IDLE: u32 = 0;
pub(super) const WAITING: u32 = 1;
pub(super) const OFFERED: u32 = 2;
pub(super) const GRANTED: u32 = 3;

#[repr(C)]
pub(super) struct Slot {
    pub(super) seq: u64,
    pub(super) state: u32,
    pub(super) pid: i32,
    pub(super) role: u32,
    pub(super) hash: u64,
    pub(super) ttl_us: i64,
    /// The request's kind (`Kind::code`), permits (0: none) and lock-delay.
    pub(super) kind: u8,
    pub(super) max_holders: i32,
    pub(super) lock_delay: i64,
    pub(super) fence: i64,
    /// End of the commit record of the grant (set with `GRANTED`).
    pub(super) commit_lsn: u64,
    pub(super) key_len: u16,
    pub(super) owner_len: u16,
    pub(super) key: [u8; MAX_KEY_BYTES],
    pub(super) owner: [u8; MAX_OWNER_BYTES],
}

/// The shared part: a header, then `procs` slot numbers (by proc number), `len` free-list
/// entries and `len` slots.
#[repr(C)]
struct Header {
    free_count: u32,
}

/// Where the table lies: set up by the postmaster, then never changed.
struct Table {
    lock: *mut pg_sys::LWLock,
    header: *mut Header,
    by_proc: *mut i32,
    procs: usize,
    free: *mut u32,
    slots: *mut Slot,
    len: usize,
}

// SAFETY: the pointers are never changed after startup, and what they point to (shared memory)
// is only reached through `Locked`, which holds the table's LWLock. A backend is one thread
// (PostgreSQL's LWLocks are held per process), and dlock starts no other.
unsafe impl Sync for Table {}

/// The table, set up by the postmaster (unset without preload).
static TABLE: ShmemCell<Table> = ShmemCell::new();

fn proc_count() -> usize {
    // SAFETY: set by the postmaster before shared memory is sized. Backends and background
    // workers, the only processes that run SQL, have proc numbers below it.
    unsafe { pg_sys::MaxBackends.max(1) as usize }
}

fn slot_count() -> usize {
    crate::settings::wait_slots().map_or(proc_count(), |n| n.min(proc_count()))
}

fn layout(procs: usize, len: usize) -> (usize, usize, usize, usize) {
    let align = |n: usize| n.div_ceil(8) * 8;
    let by_proc = align(std::mem::size_of::<Header>());
    let free = align(by_proc + procs * std::mem::size_of::<i32>());
    let slots = align(free + len * std::mem::size_of::<u32>());
    (by_proc, free, slots, slots + len * std::mem::size_of::<Slot>())
}

/// Asks for the table's memory and lock (`shmem.rs`'s request hook).
pub fn request() {
    // SAFETY: the postmaster's shared memory request phase.
    unsafe {
        pg_sys::RequestAddinShmemSpace(layout(proc_count(), slot_count()).3);
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

/// Sets the table up (`shmem.rs`'s startup hook).
pub fn startup() {
    // SAFETY: runs in the postmaster (and again after a crash restart), before any backend: the
    // struct is ours alone, sized by `layout` for these `procs` and `len`.
    let table = unsafe {
        let (procs, len) = (proc_count(), slot_count());
        let (by_proc, free, slots, size) = layout(procs, len);
        let mut found = false;
        let base = pg_sys::ShmemInitStruct(c"dlock v2 wait table".as_ptr(), size, &mut found) as *mut u8;
        let table = Table {
            lock: &mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock as *mut pg_sys::LWLock,
            header: base as *mut Header,
            by_proc: base.add(by_proc) as *mut i32,
            procs,
            free: base.add(free) as *mut u32,
            slots: base.add(slots) as *mut Slot,
            len,
        };
        if !found {
            std::ptr::write_bytes(base, 0, size);
            (*table.header).free_count = len as u32;
            for i in 0..procs {
                *table.by_proc.add(i) = NONE;
            }
            for i in 0..len {
                // Popped from the end: slot 0 first.
                *table.free.add(i) = (len - 1 - i) as u32;
            }
        }
        table
    };
    // One descriptor leaked per server start, crash restarts included.
    TABLE.set(Box::leak(Box::new(table)));
}

/// Whether the table exists (dlock was preloaded).
pub fn enabled() -> bool {
    TABLE.get().is_some()
}

/// The table while this backend holds its lock (exclusive): made only by [`with_table`], for
/// the length of its closure, so having one proves the lock is held, and `&mut` to it that
/// nothing else in this backend reaches the table meanwhile.
pub(super) struct Locked<'t> {
    table: &'t Table,
    /// Held by this process: never sent to another thread.
    _held: PhantomData<*mut ()>,
}

/// Runs `f` on the table under its lock (never across anything that can fail).
pub(super) fn with_table<R>(f: impl FnOnce(&mut Locked<'_>) -> R) -> Option<R> {
    let table = TABLE.get()?;
    // SAFETY: the table's own LWLock, released below: `f` is plain field work that cannot
    // error out while the lock is held.
    unsafe { pg_sys::LWLockAcquire(table.lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
    let result = f(&mut Locked { table, _held: PhantomData });
    // SAFETY: taken above.
    unsafe { pg_sys::LWLockRelease(table.lock) };
    Some(result)
}

impl Locked<'_> {
    /// The slot proc number `proc` has, if any.
    pub(super) fn slot_of(&self, proc: usize) -> Option<usize> {
        let t = self.table;
        // SAFETY: `proc` checked against the array's length; the lock is held (`self`).
        (proc < t.procs).then(|| unsafe { *t.by_proc.add(proc) }).filter(|&i| i != NONE).map(|i| i as usize)
    }

    /// Slot `index`.
    pub(super) fn slot(&mut self, index: usize) -> &mut Slot {
        // Slot indices come from the free list or `by_proc`, all below `len`.
        assert!(index < self.table.len, "dlock: wait slot {index} out of range");
        // SAFETY: in range; the lock is held and `self` borrowed for as long as the slot.
        unsafe { &mut *self.table.slots.add(index) }
    }

    /// Our slot, taking one from the free list if we have none; `None` if the table is full.
    pub(super) fn take_slot(&mut self, proc: usize) -> Option<usize> {
        if proc >= self.table.procs {
            return None;
        }
        if let Some(index) = self.slot_of(proc) {
            return Some(index);
        }
        let t = self.table;
        // SAFETY: the lock is held (`self`); the free list holds `free_count` slot numbers.
        unsafe {
            let header = &mut *t.header;
            if header.free_count == 0 {
                return None;
            }
            header.free_count -= 1;
            let index = *t.free.add(header.free_count as usize) as usize;
            *t.by_proc.add(proc) = index as i32;
            Some(index)
        }
    }

    /// Gives our slot back to the free list.
    pub(super) fn put_slot(&mut self, proc: usize) {
        if let Some(index) = self.slot_of(proc) {
            let t = self.table;
            // SAFETY: the lock is held (`self`); a slot is either in `by_proc` or free, never
            // both, so the free list has room for it.
            unsafe {
                let header = &mut *t.header;
                *t.free.add(header.free_count as usize) = index as u32;
                header.free_count += 1;
                *t.by_proc.add(proc) = NONE;
            }
        }
    }
}
