//! The wait table in shared memory (only with `shared_preload_libraries = 'dlock'`): slots where
//! the head of a key's queue publishes what it asks for (key, owner, role, ttl). Whoever frees
//! that key can then grant it to the head **in its own transaction** (a direct hand-off): the
//! head wakes to a lease that is already committed and durable, and returns without a WAL flush
//! of its own.
//!
//! `dlock.wait_slots` sizes the table (default: one slot per backend, so it never runs out). A
//! head takes a slot from a free list and finds none only when the DBA made the table smaller
//! than the number of keys waited on at once; it then grants itself when woken, as without
//! preload. Releasers find a head's slot through its proc number (`by_proc`).
//!
//! Slot states: `IDLE` → `WAITING` (the head published) → `OFFERED` (a releaser wrote the grant
//! in its open transaction) → `GRANTED` at the releaser's commit, or back to `WAITING` at its
//! abort. Offers are only made under the key lock, which the releaser holds until its
//! transaction has ended, so a head that holds the key lock never sees `OFFERED`. A sequence
//! number per publication keeps a late commit from touching a slot that was published again.

use crate::pending::Pending;
use pgrx::pg_sys;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::cell::{Cell, RefCell};
use std::ffi::CStr;

const KEY_MAX: usize = 1024;
const OWNER_MAX: usize = 256;
const TRANCHE: &CStr = c"dlock";
/// No slot (in `by_proc`).
const NONE: i32 = -1;

const IDLE: u32 = 0;
const WAITING: u32 = 1;
const OFFERED: u32 = 2;
const GRANTED: u32 = 3;

#[repr(C)]
struct Slot {
    seq: u64,
    state: u32,
    pid: i32,
    role: u32,
    hash: u64,
    ttl_us: i64,
    fence: i64,
    /// End of the commit record of the grant (set with `GRANTED`).
    commit_lsn: u64,
    key_len: u16,
    owner_len: u16,
    key: [u8; KEY_MAX],
    owner: [u8; OWNER_MAX],
}

/// The shared part: a header, then `procs` slot numbers (by proc number), `len` free-list
/// entries and `len` slots.
#[repr(C)]
struct Header {
    free_count: u32,
}

struct Table {
    lock: *mut pg_sys::LWLock,
    header: *mut Header,
    by_proc: *mut i32,
    procs: usize,
    free: *mut u32,
    slots: *mut Slot,
    len: usize,
}

static mut TABLE: Option<Table> = None;

/// `dlock.wait_slots`: -1 means one per backend.
static WAIT_SLOTS: GucSetting<i32> = GucSetting::<i32>::new(-1);

fn proc_count() -> usize {
    // SAFETY: set by the postmaster before shared memory is sized. Backends and background
    // workers, the only processes that run SQL, have proc numbers below it.
    unsafe { pg_sys::MaxBackends.max(1) as usize }
}

fn slot_count() -> usize {
    match WAIT_SLOTS.get() {
        n if n < 0 => proc_count(),
        n => (n as usize).min(proc_count()),
    }
}

fn layout(procs: usize, len: usize) -> (usize, usize, usize, usize) {
    let align = |n: usize| n.div_ceil(8) * 8;
    let by_proc = align(std::mem::size_of::<Header>());
    let free = align(by_proc + procs * std::mem::size_of::<i32>());
    let slots = align(free + len * std::mem::size_of::<u32>());
    (by_proc, free, slots, slots + len * std::mem::size_of::<Slot>())
}

/// Asks for the table's memory and lock (`shmem.rs`'s request hook).
pub(crate) fn request() {
    // SAFETY: the postmaster's shared memory request phase.
    unsafe {
        pg_sys::RequestAddinShmemSpace(layout(proc_count(), slot_count()).3);
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

/// Sets the table up (`shmem.rs`'s startup hook).
pub(crate) fn startup() {
    // SAFETY: runs in the postmaster (and again after a crash restart), before any backend.
    unsafe {
        let (procs, len) = (proc_count(), slot_count());
        let (by_proc, free, slots, size) = layout(procs, len);
        let mut found = false;
        let base = pg_sys::ShmemInitStruct(c"dlock wait table".as_ptr(), size, &mut found) as *mut u8;
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
        TABLE = Some(table);
    }
}

/// Defines `dlock.wait_slots` (`shmem.rs`, while preloading).
pub(crate) fn define_settings() {
    GucRegistry::define_int_guc(
        c"dlock.wait_slots",
        c"Slots of the wait table for direct hand-off (-1: one per backend).",
        c"Each key that has waiters uses one slot for its queue's head. A head that finds the \
          table full is still served, but grants itself when woken (one more WAL flush), as \
          without shared_preload_libraries. Each slot takes about 1.3 kB of shared memory.",
        &WAIT_SLOTS,
        -1,
        i32::MAX,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// Whether the table exists (dlock was preloaded).
pub fn enabled() -> bool {
    table().is_some()
}

fn table() -> Option<&'static Table> {
    // SAFETY: written once by the postmaster before backends fork, read-only afterwards.
    unsafe { (*std::ptr::addr_of!(TABLE)).as_ref() }
}

/// Runs `f` on the table under its lock (never across anything that can fail).
fn with_table<R>(f: impl FnOnce(&Table) -> R) -> Option<R> {
    let table = table()?;
    // SAFETY: the LWLock serialises every access; `f` is plain field work that cannot error
    // out while the lock is held.
    unsafe {
        pg_sys::LWLockAcquire(table.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let result = f(table);
        pg_sys::LWLockRelease(table.lock);
        Some(result)
    }
}

impl Table {
    /// The slot proc number `proc` has, if any.
    fn slot_of(&self, proc: usize) -> Option<usize> {
        // SAFETY: `proc` checked against the array's length; caller holds the lock.
        (proc < self.procs)
            .then(|| unsafe { *self.by_proc.add(proc) })
            .filter(|&i| i != NONE)
            .map(|i| i as usize)
    }

    /// Slot `index` (caller holds the lock).
    #[allow(clippy::mut_from_ref)]
    fn slot(&self, index: usize) -> &mut Slot {
        debug_assert!(index < self.len);
        // SAFETY: slot indices come from the free list or `by_proc`, all below `len`.
        unsafe { &mut *self.slots.add(index) }
    }

    /// Our slot, taking one from the free list if we have none; `None` if the table is full.
    fn take_slot(&self, proc: usize) -> Option<usize> {
        if proc >= self.procs {
            return None;
        }
        if let Some(index) = self.slot_of(proc) {
            return Some(index);
        }
        // SAFETY: caller holds the lock; the free list holds `free_count` slot numbers.
        unsafe {
            let header = &mut *self.header;
            if header.free_count == 0 {
                return None;
            }
            header.free_count -= 1;
            let index = *self.free.add(header.free_count as usize) as usize;
            *self.by_proc.add(proc) = index as i32;
            Some(index)
        }
    }

    /// Gives our slot back to the free list.
    fn put_slot(&self, proc: usize) {
        if let Some(index) = self.slot_of(proc) {
            // SAFETY: caller holds the lock; a slot is either in `by_proc` or free, never both.
            unsafe {
                let header = &mut *self.header;
                *self.free.add(header.free_count as usize) = index as u32;
                header.free_count += 1;
                *self.by_proc.add(proc) = NONE;
            }
        }
    }
}

fn my_proc() -> usize {
    // SAFETY: MyProc is set for every backend that runs SQL.
    unsafe { (*pg_sys::MyProc).pgprocno as usize }
}

/// What a head asks for, as published in its slot.
pub struct Request {
    pub owner: String,
    pub role: u32,
    pub ttl_us: i64,
    pub pid: i32,
}

/// The head publishes its request (a TTL lease of `key` for `owner`). False without a table or
/// a free slot.
pub fn publish(key: &str, hash: u64, owner: &str, role: u32, ttl_us: i64) -> bool {
    if key.len() > KEY_MAX || owner.len() > OWNER_MAX {
        return false;
    }
    // SAFETY: set at backend start.
    let pid = unsafe { pg_sys::MyProcPid };
    let published = with_table(|t| {
        let Some(index) = t.take_slot(my_proc()) else { return false };
        let s = t.slot(index);
        s.seq = s.seq.wrapping_add(1);
        s.state = WAITING;
        s.pid = pid;
        s.role = role;
        s.hash = hash;
        s.ttl_us = ttl_us;
        s.fence = 0;
        s.commit_lsn = 0;
        s.key_len = key.len() as u16;
        s.owner_len = owner.len() as u16;
        s.key[..key.len()].copy_from_slice(key.as_bytes());
        s.owner[..owner.len()].copy_from_slice(owner.as_bytes());
        true
    })
    .unwrap_or(false);
    PUBLISHED.with(|p| p.set(published));
    published
}

/// What the head finds in its slot.
pub enum Answer {
    /// Nothing yet (or no table).
    Waiting,
    /// A releaser's transaction is granting to us and has not ended yet.
    Offered,
    /// A releaser granted us the lease with this fence; it is committed locally, with its
    /// commit record ending at this WAL position (see `Handed::settle`).
    Granted(Handed),
}

/// A lease a releaser granted us, committed in its transaction.
#[derive(Clone, Copy, Debug)]
pub struct Handed {
    pub fence: i64,
    commit_lsn: u64,
}

impl Handed {
    /// Makes the grant as durable as this session's own commit would have been before it is
    /// reported: flushed locally, and replicated to the synchronous standbys when the session
    /// asks for that. The releaser's commit normally did both already, but its wait for the
    /// standbys can be cancelled (it then commits locally with a WARNING to *its* client), and
    /// it may run with a weaker `synchronous_commit` than ours.
    pub fn settle(self) -> i64 {
        // SAFETY: the WAL machinery's own waits, on a position of a committed record; a cancel
        // of the standby wait ends it with a WARNING, as for any commit.
        unsafe {
            if pg_sys::synchronous_commit > pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_OFF as i32 {
                pg_sys::XLogFlush(self.commit_lsn);
            }
            pg_sys::SyncRepWaitForLSN(self.commit_lsn, true);
        }
        self.fence
    }
}

/// The head reads its slot.
pub fn answer() -> Answer {
    with_table(|t| {
        let Some(index) = t.slot_of(my_proc()) else { return Answer::Waiting };
        let s = t.slot(index);
        match s.state {
            GRANTED => Answer::Granted(Handed { fence: s.fence, commit_lsn: s.commit_lsn }),
            OFFERED => Answer::Offered,
            _ => Answer::Waiting,
        }
    })
    .unwrap_or(Answer::Waiting)
}

/// A releaser's transaction is granting to the head right now: wait for it to end (the key
/// lock) and ask again.
pub struct InFlight;

/// The head withdraws its request: `Ok(Some(handed))` if a releaser's grant had already
/// committed (the head takes it rather than losing it), `Err(InFlight)` while one is in flight.
pub fn withdraw() -> Result<Option<Handed>, InFlight> {
    let outcome = with_table(|t| {
        let proc = my_proc();
        let Some(index) = t.slot_of(proc) else { return Ok(None) };
        let s = t.slot(index);
        match s.state {
            OFFERED => Err(InFlight),
            state => {
                s.state = IDLE;
                let handed =
                    (state == GRANTED).then_some(Handed { fence: s.fence, commit_lsn: s.commit_lsn });
                t.put_slot(proc);
                Ok(handed)
            }
        }
    })
    .unwrap_or(Ok(None));
    if outcome.is_ok() {
        PUBLISHED.with(|p| p.set(false));
    }
    outcome
}

/// The head's wait ended in an error (cancel, timeout, the client gone): forget the request.
/// An offer in flight at this very moment still commits; that lease then runs out by its ttl.
pub fn abandon() {
    if PUBLISHED.with(|p| p.replace(false)) {
        with_table(|t| {
            let proc = my_proc();
            if let Some(index) = t.slot_of(proc) {
                t.slot(index).state = IDLE;
                t.put_slot(proc);
            }
        });
    }
}

/// A publication a releaser may grant: the slot and its sequence number.
#[derive(Clone, Copy)]
pub struct Ticket {
    slot: usize,
    seq: u64,
}

/// A releaser holding the key lock: the request of the head with proc number `proc`, if it
/// waits for exactly this key; marks nothing yet.
pub fn request_for(proc: usize, key: &str, hash: u64) -> Option<(Request, Ticket)> {
    with_table(|t| {
        let slot = t.slot_of(proc)?;
        let s = t.slot(slot);
        let same = s.state == WAITING && s.hash == hash && &s.key[..s.key_len as usize] == key.as_bytes();
        same.then(|| {
            let owner = String::from_utf8_lossy(&s.owner[..s.owner_len as usize]).into_owned();
            (Request { owner, role: s.role, ttl_us: s.ttl_us, pid: s.pid }, Ticket { slot, seq: s.seq })
        })
    })
    .flatten()
}

thread_local! {
    /// Offers in flight in this transaction, by subtransaction: a rolled-back savepoint undid
    /// the grant it wrote, so its offers go back to waiting (`sub_abort`).
    static OFFERS: RefCell<Pending<(Ticket, i64)>> = const { RefCell::new(Pending::new()) };
    /// Whether this backend's slot holds a request of its own.
    static PUBLISHED: Cell<bool> = const { Cell::new(false) };
}

/// Whether this transaction granted a key to a waiting head (it cannot be prepared then).
pub fn has_offers() -> bool {
    OFFERS.with(|o| !o.borrow().is_empty())
}

/// The releaser wrote the grant for the head holding `ticket`.
pub fn offer(ticket: Ticket, fence: i64) {
    let marked = with_table(|t| {
        let s = t.slot(ticket.slot);
        let current = s.seq == ticket.seq && s.state == WAITING;
        if current {
            s.state = OFFERED;
            s.fence = fence;
        }
        current
    });
    if marked == Some(true) {
        OFFERS.with(|o| o.borrow_mut().push((ticket, fence)));
    }
}

/// The releaser's transaction ended: its offers become grants (commit) or are taken back.
pub fn settle(commit: bool) {
    settle_offers(OFFERS.with(|o| o.borrow_mut().take()), commit);
}

/// Subtransaction `sub` ended: its offers are its parent's, or (rolled back) waiting again.
pub fn settle_sub(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    if commit {
        OFFERS.with(|o| o.borrow_mut().sub_commit(sub, parent));
    } else {
        settle_offers(OFFERS.with(|o| o.borrow_mut().sub_abort(sub)), false);
    }
}

fn settle_offers(offers: Vec<(Ticket, i64)>, commit: bool) {
    // SAFETY: set by RecordTransactionCommit, before the commit callbacks run.
    let commit_lsn = unsafe { pg_sys::XactLastCommitEnd };
    for (ticket, fence) in offers {
        with_table(|t| {
            let s = t.slot(ticket.slot);
            if s.seq == ticket.seq && s.state == OFFERED && s.fence == fence {
                s.state = if commit { GRANTED } else { WAITING };
                s.commit_lsn = commit_lsn;
            }
        });
    }
}

/// The proc number of a PGPROC, by which its slot is found.
pub fn index_of(proc: &pg_sys::PGPROC) -> usize {
    proc.pgprocno as usize
}
