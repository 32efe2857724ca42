//! The free-waiters' answer slots (preloaded only), one per backend in shared memory: a session
//! in `dlock_wait_free` publishes the key it waits for in its slot, and a release that found the
//! key free writes the key's hash there before setting the waiter's latch (`free_waiters.rs`).
//!
//! The releaser answers only a waiter whose published key is the freed key, byte for byte: two
//! keys of one hash share their free-wait lock, so the hash alone would let a release of one
//! answer the waiters of the other. The key is written by the slot's owner alone and read by
//! releasers under a sequence count (odd while it is being written), so a key read half-written
//! is recognised and not answered (the waiter then reads the key itself).

use crate::pg::proc::Proc;
use crate::pg::shmem_cell::ShmemCell;
use crate::pg::version;
use dlock_core::limits::MAX_KEY_BYTES;
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU64, Ordering, fence};

const KEY_WORDS: usize = MAX_KEY_BYTES.div_ceil(8);

#[repr(C)]
#[derive(bytemuck::Zeroable)]
struct Slot {
    /// Odd while the owner writes its key.
    sequence: AtomicU64,
    key_len: AtomicU64,
    key: [AtomicU64; KEY_WORDS],
    /// The hash of the owner's key, written by a release that found that key free (0: none).
    answer: AtomicU64,
}

impl Slot {
    /// Publishes `key` (the owner only).
    fn publish(&self, key: &[u8]) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence.store(sequence.wrapping_add(1), Ordering::Relaxed);
        // The odd count goes out before any word of the new key.
        fence(Ordering::Release);
        self.key_len.store(key.len() as u64, Ordering::Relaxed);
        for (word, chunk) in self.key.iter().zip(key.chunks(8)) {
            word.store(packed(chunk), Ordering::Relaxed);
        }
        self.sequence.store(sequence.wrapping_add(2), Ordering::Release);
    }

    /// Whether the published key is `key` (false while it is being written).
    fn holds(&self, key: &[u8]) -> bool {
        let before = self.sequence.load(Ordering::Acquire);
        if before % 2 == 1 || key.len() > MAX_KEY_BYTES {
            return false;
        }
        let same = self.key_len.load(Ordering::Relaxed) == key.len() as u64
            && self
                .key
                .iter()
                .zip(key.chunks(8))
                .all(|(word, chunk)| word.load(Ordering::Relaxed) == packed(chunk));
        // The words are read before the count is read again.
        fence(Ordering::Acquire);
        same && self.sequence.load(Ordering::Relaxed) == before
    }
}

/// Up to 8 bytes of a key as one word, zero-padded.
fn packed(chunk: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..chunk.len()].copy_from_slice(chunk);
    u64::from_ne_bytes(bytes)
}

/// The slots, one per proc number below MaxBackends (unset without preload).
static SLOTS: ShmemCell<&'static [Slot]> = ShmemCell::new();

fn slot_count() -> usize {
    // SAFETY: set by the postmaster before shared memory is sized; backends and background
    // workers, the only processes that run SQL, have proc numbers below it.
    unsafe { pg_sys::MaxBackends.max(1) as usize }
}

fn slots() -> Option<&'static [Slot]> {
    SLOTS.get().copied()
}

fn mine() -> Option<&'static Slot> {
    slots()?.get(version::my_proc_number())
}

/// Whether answers exist (dlock preloaded).
pub fn available() -> bool {
    slots().is_some()
}

/// Asks for the slots' memory (`hooks/shmem.rs`'s request hook).
pub fn request() {
    ShmemCell::<&[Slot]>::request(slot_count());
}

/// Sets the slots up, all empty: all-zero is an empty slot (`hooks/shmem.rs`'s startup hook).
pub fn startup() {
    // SAFETY: the startup hook, with the length asked for.
    unsafe { SLOTS.attach(c"dlock v2 free-wait answers", slot_count()) };
}

/// This session starts waiting for `key`: published, with no answer yet.
pub fn start(key: &str) {
    if let Some(slot) = mine() {
        slot.answer.store(0, Ordering::SeqCst);
        slot.publish(key.as_bytes());
    }
}

/// Forgets any answer in this session's slot (one already there may be older than a read).
pub fn forget() {
    if let Some(slot) = mine() {
        slot.answer.store(0, Ordering::SeqCst);
    }
}

/// Whether a release answered that the key with this hash is free (since `start` or `forget`).
pub fn answered(hash: u64) -> bool {
    mine().is_some_and(|slot| slot.answer.load(Ordering::SeqCst) == hash)
}

/// Answers `proc` that `key` (of this hash) is free, if that is the key it waits for.
pub fn answer(proc: Proc, key: &str, hash: u64) {
    if let Some(slot) = slots().and_then(|s| s.get(proc.number()))
        && slot.holds(key.as_bytes())
    {
        slot.answer.store(hash, Ordering::SeqCst);
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::Slot;
    use pgrx::prelude::*;
    use std::sync::atomic::Ordering;

    #[pg_test]
    fn a_slot_holds_exactly_the_key_published_and_nothing_while_it_is_written() {
        // SAFETY: all-zero is an empty slot (as in shared memory at start-up).
        let slot: Box<Slot> = Box::new(unsafe { std::mem::zeroed() });
        assert!(!slot.holds(b"orders:42"), "nothing published");
        slot.publish(b"orders:42");
        assert!(slot.holds(b"orders:42"));
        for other in [&b"orders:43"[..], b"orders:4", b"orders:420", b"Orders:42"] {
            assert!(!slot.holds(other), "{}", String::from_utf8_lossy(other));
        }
        let longest = "k".repeat(dlock_core::limits::MAX_KEY_BYTES);
        slot.publish(longest.as_bytes());
        assert!(slot.holds(longest.as_bytes()));
        // A shorter key over a longer one: the words after it are not compared.
        slot.publish(b"short");
        assert!(slot.holds(b"short") && !slot.holds(longest.as_bytes()));
        // While its owner writes (an odd count), the slot holds no key at all.
        slot.sequence.fetch_add(1, Ordering::Relaxed);
        assert!(!slot.holds(b"short"));
        slot.sequence.fetch_add(1, Ordering::Relaxed);
        assert!(slot.holds(b"short"));
    }
}
