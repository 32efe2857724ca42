//! The wait table in shared memory (only with `shared_preload_libraries = 'dlock'`): one slot per
//! backend, where the head of a key's queue publishes what it asks for (key, owner, role, ttl).
//! Whoever frees that key can then grant it to the head **in its own transaction** (a direct
//! hand-off): the head wakes to a lease that is already committed and durable, and returns
//! without a WAL flush of its own.
//!
//! Slot states: `IDLE` → `WAITING` (the head published) → `OFFERED` (a releaser wrote the grant
//! in its open transaction) → `GRANTED` at the releaser's commit, or back to `WAITING` at its
//! abort. Offers are only made under the key lock, which the releaser holds until its
//! transaction has ended, so a head that holds the key lock never sees `OFFERED`. A sequence
//! number per publication keeps a late commit from touching a slot that was published again.
//!
//! Without preload there is no table and the head grants itself after being woken.

use pgrx::pg_sys;
use std::cell::{Cell, RefCell};
use std::ffi::CStr;

const KEY_MAX: usize = 1024;
const OWNER_MAX: usize = 256;
const TRANCHE: &CStr = c"dlock";

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

struct Table {
    lock: *mut pg_sys::LWLock,
    slots: *mut Slot,
    len: usize,
}

static mut TABLE: Option<Table> = None;
static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;

fn slot_count() -> usize {
    // SAFETY: set by the postmaster before shared memory is sized.
    unsafe { pg_sys::MaxBackends.max(1) as usize }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request() {
    // SAFETY: the postmaster's shared memory request phase.
    unsafe {
        if let Some(prev) = PREV_REQUEST {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Slot>() * slot_count());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup() {
    // SAFETY: runs in the postmaster (and again after a crash restart), before any backend.
    unsafe {
        if let Some(prev) = PREV_STARTUP {
            prev();
        }
        let len = slot_count();
        let mut found = false;
        let slots = pg_sys::ShmemInitStruct(
            c"dlock wait table".as_ptr(),
            std::mem::size_of::<Slot>() * len,
            &mut found,
        ) as *mut Slot;
        if !found {
            std::ptr::write_bytes(slots, 0, len);
        }
        let lock = &mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock as *mut pg_sys::LWLock;
        TABLE = Some(Table { lock, slots, len });
    }
}

/// Asks for the table; from `_PG_init`, and only while preloading.
pub fn request_at_preload() {
    // SAFETY: hooks chained once, in the postmaster.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup);
    }
}

/// Whether the table exists (dlock was preloaded).
pub fn enabled() -> bool {
    table().is_some()
}

fn table() -> Option<&'static Table> {
    // SAFETY: written once by the postmaster before backends fork, read-only afterwards.
    unsafe { (*std::ptr::addr_of!(TABLE)).as_ref() }
}

/// Runs `f` on slot `index` under the table's lock (never across anything that can fail).
fn with_slot<R>(index: usize, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
    let table = table()?;
    if index >= table.len {
        return None;
    }
    // SAFETY: the slot lies in the table; the LWLock serialises every access; `f` is plain
    // field work that cannot error out while the lock is held.
    unsafe {
        pg_sys::LWLockAcquire(table.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let result = f(&mut *table.slots.add(index));
        pg_sys::LWLockRelease(table.lock);
        Some(result)
    }
}

fn my_index() -> usize {
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

/// The head publishes its request (a TTL lease of `key` for `owner`). False without a table.
pub fn publish(key: &str, hash: u64, owner: &str, role: u32, ttl_us: i64) -> bool {
    if key.len() > KEY_MAX || owner.len() > OWNER_MAX {
        return false;
    }
    // SAFETY: set at backend start.
    let pid = unsafe { pg_sys::MyProcPid };
    with_slot(my_index(), |s| {
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
    })
    .inspect(|()| PUBLISHED.with(|p| p.set(true)))
    .is_some()
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
    with_slot(my_index(), |s| match s.state {
        GRANTED => Answer::Granted(Handed { fence: s.fence, commit_lsn: s.commit_lsn }),
        OFFERED => Answer::Offered,
        _ => Answer::Waiting,
    })
    .unwrap_or(Answer::Waiting)
}

/// A releaser's transaction is granting to the head right now: wait for it to end (the key
/// lock) and ask again.
pub struct InFlight;

/// The head withdraws its request: `Ok(Some(handed))` if a releaser's grant had already
/// committed (the head takes it rather than losing it), `Err(InFlight)` while one is in flight.
pub fn withdraw() -> Result<Option<Handed>, InFlight> {
    let outcome = with_slot(my_index(), |s| match s.state {
        OFFERED => Err(InFlight),
        state => {
            s.state = IDLE;
            Ok((state == GRANTED).then_some(Handed { fence: s.fence, commit_lsn: s.commit_lsn }))
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
        with_slot(my_index(), |s| s.state = IDLE);
    }
}

/// A releaser holding the key lock: the request of the head in slot `index`, if it waits for
/// exactly this key; marks nothing yet.
pub fn request_for(index: usize, key: &str, hash: u64) -> Option<(Request, u64)> {
    with_slot(index, |s| {
        let same = s.state == WAITING && s.hash == hash && &s.key[..s.key_len as usize] == key.as_bytes();
        same.then(|| {
            let owner = String::from_utf8_lossy(&s.owner[..s.owner_len as usize]).into_owned();
            (Request { owner, role: s.role, ttl_us: s.ttl_us, pid: s.pid }, s.seq)
        })
    })
    .flatten()
}

thread_local! {
    /// Offers in flight in this transaction: (slot, publication, fence).
    static OFFERS: RefCell<Vec<(usize, u64, i64)>> = const { RefCell::new(Vec::new()) };
    /// Whether this backend's slot holds a request of its own.
    static PUBLISHED: Cell<bool> = const { Cell::new(false) };
}

/// Whether this transaction granted a key to a waiting head (it cannot be prepared then).
pub fn has_offers() -> bool {
    OFFERS.with(|o| !o.borrow().is_empty())
}

/// The releaser wrote the grant for the head in slot `index` (publication `seq`).
pub fn offer(index: usize, seq: u64, fence: i64) {
    let marked = with_slot(index, |s| {
        let current = s.seq == seq && s.state == WAITING;
        if current {
            s.state = OFFERED;
            s.fence = fence;
        }
        current
    });
    if marked == Some(true) {
        OFFERS.with(|o| o.borrow_mut().push((index, seq, fence)));
    }
}

/// The releaser's transaction ended: its offers become grants (commit) or are taken back.
pub fn settle(commit: bool) {
    // SAFETY: set by RecordTransactionCommit, before the commit callbacks run.
    let commit_lsn = unsafe { pg_sys::XactLastCommitEnd };
    for (index, seq, fence) in OFFERS.with(|o| std::mem::take(&mut *o.borrow_mut())) {
        with_slot(index, |s| {
            if s.seq == seq && s.state == OFFERED && s.fence == fence {
                s.state = if commit { GRANTED } else { WAITING };
                s.commit_lsn = commit_lsn;
            }
        });
    }
}

/// The slot of a PGPROC.
pub fn index_of(proc: &pg_sys::PGPROC) -> usize {
    proc.pgprocno as usize
}
