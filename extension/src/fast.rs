//! Fast mode: TTL leases kept only in shared memory (preloaded only), for users who accept
//! Redis-like durability in exchange for no WAL and no table on the lock path.
//!
//! What holds, precisely:
//! - **Mutual exclusion while the server runs:** a fast key has at most one live lease; every
//!   check and change happens under the key's partition lock, on the server clock.
//! - **Across a restart or crash, by lock-delay:** leases live in memory, so a restart forgets
//!   them. Instead, after every server start no fast key is granted for `dlock.fast_max_ttl`
//!   (the longest fast ttl anyone may hold), so every lease granted before the restart has run
//!   out before its key can be granted again (Chubby's lock-delay).
//! - **Fences only grow, across restarts and failover:** a fence is `epoch << 20 | n`, where
//!   the epoch is drawn from the WAL-logged fence sequence (flushed, and replicated to the
//!   synchronous standbys) the first time a fast key is granted after start, and again every
//!   2^20 grants.
//! - **Not transactional:** a fast acquire, renew or release takes effect at once, and a
//!   ROLLBACK does not undo it (as advisory locks).
//! - Not replicated: a standby refuses fast calls; after a failover the new primary's
//!   lock-delay covers leases granted by the old one.
//! - Waiting wakes on release (a condition variable per partition) and at the holder's
//!   expiry, but is not FIFO.
//!
//! Keys belong to a database, as durable ones do. They are found by a 64-bit hash of key and
//! database; two different keys with the same hash (never seen in practice) count as one key
//! here: the second waits, which is safe.

use crate::args::Micros;
use crate::current::now;
use crate::error::DlockError;
use crate::keylock::key_hash;
use crate::lease::Timestamp;
use pgrx::pg_sys;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Longest fast key and owner, in bytes (entries are fixed-size in shared memory).
pub const MAX_KEY_BYTES: usize = 256;
pub const MAX_OWNER_BYTES: usize = 128;

const PARTITIONS: usize = 16;
const TRANCHE: &CStr = c"dlock fast";
const COUNTER_BITS: u32 = 20;
const COUNTER_MAX: u64 = (1 << COUNTER_BITS) - 1;
/// Draw the next epoch this many grants before the counter runs out, so that racing grants
/// rarely find it exhausted.
const COUNTER_MARGIN: u64 = 4096;

static MAX_LEASES: GucSetting<i32> = GucSetting::<i32>::new(16384);
static MAX_TTL_S: GucSetting<i32> = GucSetting::<i32>::new(60);

#[repr(C)]
struct Entry {
    /// The hash table's key: the key's 64-bit hash.
    hash: u64,
    database: u32,
    key_len: u16,
    owner_len: u16,
    role: u32,
    hold_count: i32,
    fence: i64,
    expires_at: Timestamp,
    key: [u8; MAX_KEY_BYTES],
    owner: [u8; MAX_OWNER_BYTES],
}

#[repr(C)]
struct Shared {
    /// When this server's shared memory was set up: the lock-delay starts here.
    started_at: Timestamp,
    /// `epoch << COUNTER_BITS | n` of the last fence handed out (epoch 0: none drawn yet).
    fence: AtomicU64,
    /// Entries in the hash table, live or expired (expired ones are reused or swept).
    entries: AtomicU32,
    wake: [pg_sys::ConditionVariable; PARTITIONS],
    /// Sessions sleeping (or about to) on each partition's condition variable: a release wakes
    /// them only if there are any, sparing every release the variable's spinlock (which, under
    /// contention on few cores, can back off for up to a second).
    waiting: [AtomicU32; PARTITIONS],
}

struct Table {
    shared: *mut Shared,
    hash: *mut pg_sys::HTAB,
    /// PARTITIONS partition locks, then the epoch lock.
    locks: *mut pg_sys::LWLockPadded,
}

static mut TABLE: Option<Table> = None;
static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;

use crate::heap::nextval_internal;

fn capacity() -> usize {
    MAX_LEASES.get().max(1) as usize
}

/// `dlock.fast_max_ttl` in microseconds.
pub fn max_ttl_us() -> Micros {
    i64::from(MAX_TTL_S.get()) * 1_000_000
}

/// `dlock.fast_max_ttl` as set, for messages.
pub fn max_ttl_text() -> String {
    format!("{} s", MAX_TTL_S.get())
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request() {
    // SAFETY: the postmaster's shared memory request phase.
    unsafe {
        if let Some(prev) = PREV_REQUEST {
            prev();
        }
        let entries = pg_sys::hash_estimate_size(capacity() as i64, std::mem::size_of::<Entry>());
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Shared>() + entries);
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), PARTITIONS as i32 + 1);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup() {
    // SAFETY: runs in the postmaster (and again after a crash restart), before any backend.
    unsafe {
        if let Some(prev) = PREV_STARTUP {
            prev();
        }
        let mut found = false;
        let shared =
            pg_sys::ShmemInitStruct(c"dlock fast state".as_ptr(), std::mem::size_of::<Shared>(), &mut found)
                as *mut Shared;
        if !found {
            std::ptr::addr_of_mut!((*shared).started_at).write(pg_sys::GetCurrentTimestamp());
            std::ptr::addr_of_mut!((*shared).fence).write(AtomicU64::new(0));
            std::ptr::addr_of_mut!((*shared).entries).write(AtomicU32::new(0));
            for cv in (*shared).wake.iter_mut() {
                pg_sys::ConditionVariableInit(cv);
            }
            std::ptr::addr_of_mut!((*shared).waiting).write(std::array::from_fn(|_| AtomicU32::new(0)));
        }
        let mut info: pg_sys::HASHCTL = std::mem::zeroed();
        info.keysize = std::mem::size_of::<u64>();
        info.entrysize = std::mem::size_of::<Entry>();
        info.num_partitions = PARTITIONS as i64;
        let hash = pg_sys::ShmemInitHash(
            c"dlock fast leases".as_ptr(),
            capacity() as i64,
            capacity() as i64,
            &mut info,
            (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS | pg_sys::HASH_PARTITION) as i32,
        );
        TABLE = Some(Table { shared, hash, locks: pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr()) });
    }
}

/// Defines the fast-mode settings and asks for the table; from `_PG_init`, only while
/// preloading (server-start settings can only be defined then).
pub fn request_at_preload() {
    // SAFETY: hooks chained once, in the postmaster.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        GucRegistry::define_int_guc(
            c"dlock.fast_max_leases",
            c"How many fast-mode leases shared memory holds.",
            c"Each takes about 450 bytes. A fast acquire of a new key when the table is full \
              (after expired leases are cleared) fails with SQLSTATE 53400.",
            &MAX_LEASES,
            1,
            i32::MAX / 2,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"dlock.fast_max_ttl",
            c"Longest ttl of a fast-mode lease; also the lock-delay after every server start.",
            c"No fast key is granted for this long after the server starts, so that leases \
              granted before a restart or crash have run out first.",
            &MAX_TTL_S,
            1,
            86_400,
            GucContext::Postmaster,
            GucFlags::UNIT_S,
        );
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup);
    }
}

fn table(function: &'static str) -> &'static Table {
    // SAFETY: written once by the postmaster before backends fork, read-only afterwards.
    let table = unsafe { (*std::ptr::addr_of!(TABLE)).as_ref() };
    let Some(table) = table else { DlockError::NotPreloaded.raise(function) };
    // SAFETY: reads shared state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        DlockError::OnStandby.raise(function);
    }
    table
}

/// The key a call is about: its text, hash, and partition.
struct Key<'a> {
    text: &'a str,
    database: u32,
    hash: u64,
    part: usize,
}

impl<'a> Key<'a> {
    fn new(text: &'a str) -> Self {
        let database = current_database();
        let hash = key_hash(text) ^ u64::from(database).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Key { text, database, hash, part: (hash as u32 as usize) % PARTITIONS }
    }

    /// Whether `entry` is this key's (and not one that shares its hash).
    fn owns(&self, entry: &Entry) -> bool {
        entry.database == self.database && &entry.key[..entry.key_len as usize] == self.text.as_bytes()
    }
}

fn current_database() -> u32 {
    // SAFETY: set for every backend that runs SQL.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

impl Table {
    fn lock(&self, index: usize) -> *mut pg_sys::LWLock {
        // SAFETY: the tranche has PARTITIONS + 1 locks.
        unsafe { &mut (*self.locks.add(index)).lock }
    }

    fn shared(&self) -> &Shared {
        // SAFETY: initialised at startup; only atomics and CVs are touched after.
        unsafe { &*self.shared }
    }

    /// Runs `f` under the partition lock of `key` (`f` never errors out).
    fn locked<R>(&self, key: &Key, f: impl FnOnce(&Table) -> R) -> R {
        // SAFETY: LWLocks are released by the abort path should anything below fail.
        unsafe {
            pg_sys::LWLockAcquire(self.lock(key.part), pg_sys::LWLockMode::LW_EXCLUSIVE);
            let result = f(self);
            pg_sys::LWLockRelease(self.lock(key.part));
            result
        }
    }

    /// The entry of `key` (caller holds its partition lock, which is what makes it ours to
    /// change).
    #[allow(clippy::mut_from_ref)]
    fn find(&self, key: &Key, action: pg_sys::HASHACTION::Type) -> (Option<&mut Entry>, bool) {
        let mut found = false;
        // SAFETY: a shared partitioned table, searched with the hash code of its own key bytes
        // (always computed the same way, so lookups agree), under the partition's lock.
        unsafe {
            let entry = pg_sys::hash_search_with_hash_value(
                self.hash,
                &key.hash as *const u64 as *const std::ffi::c_void,
                key.hash as u32,
                action,
                &mut found,
            ) as *mut Entry;
            (entry.as_mut(), found)
        }
    }

    /// Wakes the sessions waiting on `key`'s partition, if any. Called after the change, with
    /// the partition lock given back: a waiter counts itself before it re-checks under that
    /// lock, so either it sees the change or we see it counted.
    fn wake(&self, key: &Key) {
        if self.shared().waiting[key.part].load(Ordering::SeqCst) == 0 {
            return;
        }
        // SAFETY: a condition variable in shared memory.
        unsafe { pg_sys::ConditionVariableBroadcast(&self.shared().wake[key.part] as *const _ as *mut _) };
    }

    /// The next fence, drawing a new epoch first when needed (never under a partition lock:
    /// drawing flushes WAL).
    fn ensure_epoch(&self) {
        let state = self.shared().fence.load(Ordering::Acquire);
        if state >> COUNTER_BITS != 0 && state & COUNTER_MAX < COUNTER_MAX - COUNTER_MARGIN {
            return;
        }
        let epoch_lock = self.lock(PARTITIONS);
        // SAFETY: the epoch lock serialises draws; nextval and the flush may error out, and the
        // abort path releases the lock.
        unsafe {
            pg_sys::LWLockAcquire(epoch_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
            let state = self.shared().fence.load(Ordering::Acquire);
            if state >> COUNTER_BITS == 0 || state & COUNTER_MAX >= COUNTER_MAX - COUNTER_MARGIN {
                let epoch = draw_epoch();
                self.shared().fence.store(epoch << COUNTER_BITS, Ordering::Release);
            }
            pg_sys::LWLockRelease(epoch_lock);
        }
    }

    /// A fresh fence, or `None` if this epoch ran out under us (draw another and retry). Never
    /// carries into the epoch bits: an epoch nobody drew could repeat one drawn later.
    fn next_fence(&self) -> Option<i64> {
        let fence = &self.shared().fence;
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

    /// Clears every expired entry (all partition locks, in order); how many it cleared.
    fn sweep(&self, now: Timestamp) -> usize {
        // SAFETY: holding every partition lock, the table may be scanned and changed.
        unsafe {
            for i in 0..PARTITIONS {
                pg_sys::LWLockAcquire(self.lock(i), pg_sys::LWLockMode::LW_EXCLUSIVE);
            }
            let mut dead = Vec::new();
            let mut status: pg_sys::HASH_SEQ_STATUS = std::mem::zeroed();
            pg_sys::hash_seq_init(&mut status, self.hash);
            loop {
                let entry = pg_sys::hash_seq_search(&mut status) as *mut Entry;
                let Some(entry) = entry.as_ref() else { break };
                if entry.expires_at <= now {
                    dead.push(entry.hash);
                }
            }
            for hash in &dead {
                pg_sys::hash_search_with_hash_value(
                    self.hash,
                    hash as *const u64 as *const std::ffi::c_void,
                    *hash as u32,
                    pg_sys::HASHACTION::HASH_REMOVE,
                    std::ptr::null_mut(),
                );
            }
            self.shared().entries.fetch_sub(dead.len() as u32, Ordering::AcqRel);
            for i in (0..PARTITIONS).rev() {
                pg_sys::LWLockRelease(self.lock(i));
            }
            dead.len()
        }
    }
}

/// Draws a fence epoch from the fence sequence, flushed and replicated before use.
unsafe fn draw_epoch() -> u64 {
    // SAFETY: catalog lookups and nextval inside the caller's transaction; the sequence is the
    // extension's own, so no permission check applies; then the WAL machinery's own waits.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"dlock_internal".as_ptr(), false);
        let seq = pg_sys::get_relname_relid(c"fence_seq".as_ptr(), schema);
        let epoch = nextval_internal(seq, false);
        let lsn = pg_sys::GetXLogInsertRecPtr();
        pg_sys::XLogFlush(lsn);
        pg_sys::SyncRepWaitForLSN(lsn, false);
        epoch as u64
    }
}

/// Who asks, and for how long.
pub struct Request<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub role: u32,
    pub ttl: Micros,
}

enum Try {
    Granted(i64),
    /// Busy until then (the holder's expiry, or the end of the lock-delay).
    Busy(Timestamp),
    Full,
    /// The fence epoch ran out under us: try again (a new one is drawn first).
    Again,
}

fn try_grant(table: &Table, key: &Key, req: &Request, now: Timestamp) -> Try {
    let delay_ends = table.shared().started_at.saturating_add(max_ttl_us());
    if now < delay_ends {
        return Try::Busy(delay_ends);
    }
    table.ensure_epoch();
    table.locked(key, |t| {
        let (entry, found) = t.find(key, pg_sys::HASHACTION::HASH_FIND);
        let entry = match entry {
            Some(e) if found && e.expires_at > now => {
                let same = key.owns(e)
                    && &e.owner[..e.owner_len as usize] == req.owner.as_bytes()
                    && e.role == req.role;
                if !same {
                    return Try::Busy(e.expires_at);
                }
                // Reentry by the holder: one more hold, and the new ttl.
                e.hold_count += 1;
                e.expires_at = now.saturating_add(req.ttl);
                return Try::Granted(e.fence);
            }
            Some(e) => e,
            None => {
                if t.shared().entries.load(Ordering::Acquire) as usize >= capacity() {
                    return Try::Full;
                }
                let (entry, _) = t.find(key, pg_sys::HASHACTION::HASH_ENTER_NULL);
                let Some(entry) = entry else { return Try::Full };
                t.shared().entries.fetch_add(1, Ordering::AcqRel);
                entry
            }
        };
        let Some(fence) = t.next_fence() else {
            // The epoch ran out under us: leave the slot free (expired) and draw again.
            entry.expires_at = 0;
            return Try::Again;
        };
        entry.hash = key.hash;
        entry.database = key.database;
        entry.key_len = key.text.len() as u16;
        entry.key[..key.text.len()].copy_from_slice(key.text.as_bytes());
        entry.owner_len = req.owner.len() as u16;
        entry.owner[..req.owner.len()].copy_from_slice(req.owner.as_bytes());
        entry.role = req.role;
        entry.hold_count = 1;
        entry.fence = fence;
        entry.expires_at = now.saturating_add(req.ttl);
        Try::Granted(fence)
    })
}

/// `dlock_fast_acquire`: the fence, or `None` when `wait` ran out first.
pub fn acquire(req: &Request, wait: Option<Micros>) -> Option<i64> {
    const F: &str = "dlock_fast_acquire";
    let table = table(F);
    let key = Key::new(req.key);
    let deadline = wait.map(|w| now().saturating_add(w));
    let cv = &table.shared().wake[key.part] as *const _ as *mut pg_sys::ConditionVariable;
    let mut sleeping = false;
    let outcome = loop {
        let now = now();
        let busy_until = match try_grant(table, &key, req, now) {
            Try::Granted(fence) => break Some(fence),
            Try::Busy(until) => until,
            Try::Again => continue,
            Try::Full if table.sweep(now) > 0 => continue,
            Try::Full => {
                if sleeping {
                    stop_waiting(table);
                }
                DlockError::FastTableFull { max: capacity() }.raise(F)
            }
        };
        if deadline.is_some_and(|d| now >= d) {
            break None;
        }
        if !sleeping {
            // Counted and registered before the next check, so a release between it and the
            // sleep wakes us.
            table.shared().waiting[key.part].fetch_add(1, Ordering::SeqCst);
            WAITING_ON.with(|w| w.set(Some(key.part)));
            // SAFETY: a condition variable in shared memory.
            unsafe { pg_sys::ConditionVariablePrepareToSleep(cv) };
            sleeping = true;
            continue;
        }
        // Sleep until a release wakes us, the holder's expiry or our deadline; a client that
        // hangs up meanwhile ends the backend (its socket signals, see `interrupt.rs`).
        let until = deadline.map_or(busy_until, |d| d.min(busy_until));
        let ms = ((until - now + 999) / 1000).clamp(1, i64::from(i32::MAX));
        // SAFETY: the standard condition variable wait; interrupts are served inside.
        crate::lockwait::watching_client(|| unsafe {
            pg_sys::ConditionVariableTimedSleep(cv, ms, pg_sys::PG_WAIT_EXTENSION)
        });
    };
    if sleeping {
        stop_waiting(table);
    }
    outcome
}

thread_local! {
    /// The partition this session counted itself waiting on, until it stops.
    static WAITING_ON: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Leaves the condition variable's wait list and the count.
fn stop_waiting(table: &Table) {
    // SAFETY: leaves whatever condition variable this session prepared to sleep on.
    unsafe { pg_sys::ConditionVariableCancelSleep() };
    if let Some(part) = WAITING_ON.with(|w| w.take()) {
        table.shared().waiting[part].fetch_sub(1, Ordering::SeqCst);
    }
}

/// End of transaction: a wait that ended in an error (cancel, timeout) is no longer counted.
pub fn reset() {
    // SAFETY: written once by the postmaster before backends fork, read-only afterwards.
    let table = unsafe { (*std::ptr::addr_of!(TABLE)).as_ref() };
    if WAITING_ON.with(|w| w.get()).is_some()
        && let Some(table) = table
    {
        stop_waiting(table);
    }
}

/// Runs `f` on the caller's live lease of `key`, if it holds one: `Err` for the right owner
/// under another role (unless admin).
fn with_own<R>(
    function: &'static str,
    action: &'static str,
    key_text: &str,
    owner: &str,
    role: u32,
    admin: bool,
    f: impl FnOnce(&mut Entry, Timestamp) -> R,
) -> Result<Option<R>, DlockError> {
    let table = table(function);
    let key = Key::new(key_text);
    let now = now();
    let result = table.locked(&key, |t| {
        let (entry, found) = t.find(&key, pg_sys::HASHACTION::HASH_FIND);
        match entry {
            Some(e)
                if found
                    && e.expires_at > now
                    && key.owns(e)
                    && &e.owner[..e.owner_len as usize] == owner.as_bytes() =>
            {
                if e.role != role && !admin {
                    return Err(DlockError::ForeignRole { action });
                }
                Ok(Some(f(e, now)))
            }
            _ => Ok(None),
        }
    });
    if result.as_ref().is_ok_and(Option::is_some) {
        table.wake(&key);
    }
    result
}

/// `dlock_fast_release`: gives back one hold; whether the caller held the key.
pub fn release(key: &str, owner: &str, role: u32, admin: bool) -> Result<bool, DlockError> {
    let released = with_own("dlock_fast_release", "release", key, owner, role, admin, |e, _| {
        e.hold_count -= 1;
        if e.hold_count == 0 {
            // Expired now: the slot is free for the next taker, and reclaimed by a sweep.
            e.expires_at = 0;
        }
    })?;
    Ok(released.is_some())
}

/// `dlock_fast_renew`: the new expiry, or `None` if the caller does not hold the key.
pub fn renew(
    key: &str,
    owner: &str,
    role: u32,
    admin: bool,
    ttl: Micros,
) -> Result<Option<Timestamp>, DlockError> {
    with_own("dlock_fast_renew", "renew", key, owner, role, admin, |e, now| {
        e.expires_at = now.saturating_add(ttl);
        e.expires_at
    })
}

/// `dlock_fast_holds`: whether the live fast lease on `key` carries `fence`.
pub fn holds(key_text: &str, fence: i64) -> bool {
    let table = table("dlock_fast_holds");
    let key = Key::new(key_text);
    let now = now();
    table.locked(&key, |t| match t.find(&key, pg_sys::HASHACTION::HASH_FIND) {
        (Some(e), true) => e.expires_at > now && key.owns(e) && e.fence == fence,
        _ => false,
    })
}

/// A live fast lease, as `dlock_fast_locks` shows it.
pub struct Row {
    pub key: String,
    pub owner: String,
    pub role: u32,
    pub fence: i64,
    pub hold_count: i32,
    pub expires_at: Timestamp,
}

/// Every live fast lease of this database.
pub fn live() -> Vec<Row> {
    let table = table("dlock_fast_locks");
    let (now, database) = (now(), current_database());
    let mut rows = Vec::new();
    // SAFETY: a scan holding every partition lock (shared); nothing in it can fail.
    unsafe {
        for i in 0..PARTITIONS {
            pg_sys::LWLockAcquire(table.lock(i), pg_sys::LWLockMode::LW_SHARED);
        }
        let mut status: pg_sys::HASH_SEQ_STATUS = std::mem::zeroed();
        pg_sys::hash_seq_init(&mut status, table.hash);
        loop {
            let entry = pg_sys::hash_seq_search(&mut status) as *mut Entry;
            let Some(e) = entry.as_ref() else { break };
            if e.expires_at > now && e.database == database {
                rows.push(Row {
                    key: String::from_utf8_lossy(&e.key[..e.key_len as usize]).into_owned(),
                    owner: String::from_utf8_lossy(&e.owner[..e.owner_len as usize]).into_owned(),
                    role: e.role,
                    fence: e.fence,
                    hold_count: e.hold_count,
                    expires_at: e.expires_at,
                });
            }
        }
        for i in (0..PARTITIONS).rev() {
            pg_sys::LWLockRelease(table.lock(i));
        }
    }
    rows
}
