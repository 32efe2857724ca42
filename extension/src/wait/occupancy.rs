//! Sessions in queues (heads and those in line), counted per bucket of key hashes in shared
//! memory. A count is raised before the queue lock is requested and lowered after it is let go
//! (at `leave`, a subtransaction abort, or the end of the transaction), so a zero proves that
//! no queue of the bucket's keys has anyone: whoever then looks for a head holds the key lock,
//! which a head takes only after joining. Without preload nothing is counted and every lookup
//! is made.

use crate::pg::shmem_cell::ShmemCell;
use std::sync::atomic::{AtomicU32, Ordering};

const BUCKETS: usize = 1024;

/// Which waiters a count is of: sessions in queues, or sessions waiting for a key to be free
/// (`free_waiters.rs`), counted apart so that a hot key's queue does not make every release
/// look for free-waiters too.
#[derive(Clone, Copy)]
pub enum Of {
    Queues = 0,
    FreeWaits = 1,
}

/// `BUCKETS` counts of each kind.
const COUNTS_LEN: usize = 2 * BUCKETS;

/// The counts in shared memory (unset without preload).
static COUNTS: ShmemCell<&'static [AtomicU32]> = ShmemCell::new();

fn bucket(of: Of, hash: u64) -> usize {
    of as usize * BUCKETS + (hash % BUCKETS as u64) as usize
}

fn counts() -> Option<&'static [AtomicU32]> {
    COUNTS.get().copied()
}

/// Whether no session is in a queue of the bucket of `hash` (always false without preload).
pub fn surely_empty(hash: u64) -> bool {
    surely_none(Of::Queues, hash)
}

/// Whether no session of kind `of` waits on the bucket of `hash` (always false without preload).
pub fn surely_none(of: Of, hash: u64) -> bool {
    counts().is_some_and(|c| c[bucket(of, hash)].load(Ordering::SeqCst) == 0)
}

/// One more session in a queue of the bucket of `hash` (paired with `exit` by `MINE`).
pub fn enter(hash: u64) {
    enter_as(Of::Queues, hash);
}

pub fn exit(hash: u64) {
    exit_as(Of::Queues, hash);
}

/// One more session of kind `of` waiting on the bucket of `hash`.
pub fn enter_as(of: Of, hash: u64) {
    if let Some(c) = counts() {
        c[bucket(of, hash)].fetch_add(1, Ordering::SeqCst);
    }
}

pub fn exit_as(of: Of, hash: u64) {
    if let Some(c) = counts() {
        c[bucket(of, hash)].fetch_sub(1, Ordering::SeqCst);
    }
}

/// Asks for the counters' memory (`shmem.rs`'s request hook).
pub fn request() {
    ShmemCell::<&[AtomicU32]>::request(COUNTS_LEN);
}

/// Sets the counters up, all zero (`shmem.rs`'s startup hook; after a crash restart too,
/// when every session that counted is gone).
pub fn startup() {
    // SAFETY: the startup hook, with the length asked for.
    unsafe { COUNTS.attach(c"dlock v2 waiter counts", COUNTS_LEN) };
}
