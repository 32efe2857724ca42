//! Fast mode's wait queues: a FIFO line of waiters per key, in shared memory. Each backend has
//! one waiter slot (by proc number) holding its request; a key's entry links the slots of its
//! waiters, first to last. Whoever releases a key grants it to the first waiter in place, under
//! the key's partition lock, and sets that one backend's latch: one wake-up per release, in
//! arrival order. Every slot and link is read and written under the partition lock of the key
//! the slot waits on.

use crate::pg::version;
use dlock_core::limits::{MAX_FAST_KEY_BYTES as MAX_KEY_BYTES, MAX_FAST_OWNER_BYTES as MAX_OWNER_BYTES};
use dlock_core::{Micros, Share, Timestamp};
use pgrx::pg_sys;

/// No slot: the end of a line, or an empty one.
pub(super) const NONE: i32 = -1;

/// A key's line of waiters, kept in its table entry: first and last slot, or `NONE`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Line {
    pub(super) first: i32,
    pub(super) last: i32,
}

impl Line {
    /// Nobody waits.
    pub(super) const EMPTY: Line = Line { first: NONE, last: NONE };

    pub(super) fn is_empty(&self) -> bool {
        self.first == NONE
    }
}

/// What a waiter asks for: the key (text and database), owner, role and ttl.
pub(super) struct Asked<'a> {
    pub(super) key: &'a str,
    pub(super) database: u32,
    pub(super) owner: &'a str,
    pub(super) role: u32,
    pub(super) ttl: Micros,
}

/// What became of a waiter.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(super) enum State {
    /// Not waiting.
    Idle,
    /// In a key's line.
    Waiting,
    /// Granted by a release: the lease (with `fence`) is its own.
    Granted,
    /// Its turn came, but its role or database held its share of the table.
    Refused,
}

/// A backend's request while it waits for a fast key.
#[repr(C)]
pub(super) struct Waiter {
    pub(super) next: i32,
    pub(super) state: State,
    pub(super) database: u32,
    pub(super) role: u32,
    pub(super) ttl: Micros,
    /// When it wakes by itself to look again (the holder's expiry, or its deadline): a grant
    /// that makes it first in line wakes it only if the new lease would expire before that.
    pub(super) wake_at: Timestamp,
    /// Granted: its fence. Refused: which share, and its figures.
    pub(super) fence: i64,
    pub(super) refused: (bool, i64, i64),
    pub(super) key_len: u16,
    pub(super) owner_len: u16,
    pub(super) key: [u8; MAX_KEY_BYTES],
    pub(super) owner: [u8; MAX_OWNER_BYTES],
}

impl Waiter {
    pub(super) fn owner(&self) -> &[u8] {
        &self.owner[..self.owner_len as usize]
    }

    pub(super) fn key(&self) -> &[u8] {
        &self.key[..self.key_len as usize]
    }

    /// The share that refused it.
    pub(super) fn share(&self) -> Share {
        let (role, held, max) = self.refused;
        if role { Share::Role { held, max } } else { Share::Database { held, max } }
    }

    /// Notes the share that refused it.
    pub(super) fn refuse(&mut self, share: Share) {
        self.state = State::Refused;
        self.refused = match share {
            Share::Role { held, max } => (true, held, max),
            Share::Database { held, max } => (false, held, max),
        };
    }
}

/// The waiter slots, one per backend, in shared memory.
pub(super) struct Slots {
    base: *mut Waiter,
    len: usize,
}

impl Slots {
    /// The memory the slots need.
    pub(super) fn size() -> usize {
        std::mem::size_of::<Waiter>() * count()
    }

    /// Sets the slots up at `base` (all idle; after a crash restart too).
    ///
    /// # Safety
    /// `base` points to [`Slots::size`] bytes of shared memory that nothing else uses.
    pub(super) unsafe fn startup(base: *mut u8, found: bool) -> Slots {
        let (base, len) = (base as *mut Waiter, count());
        if !found {
            // SAFETY: as the caller promised; an all-zero Waiter is idle (State::Idle == 0)
            // with empty key and owner, and `next` is set before any use.
            unsafe { std::ptr::write_bytes(base, 0, len) };
        }
        Slots { base, len }
    }

    /// Slot `index` (caller holds the partition lock of the key it waits on, or it is its own
    /// idle slot).
    #[allow(clippy::mut_from_ref)]
    pub(super) fn get(&self, index: i32) -> &mut Waiter {
        assert!(index >= 0 && (index as usize) < self.len, "dlock: fast waiter slot {index} out of range");
        // SAFETY: in range; access is serialised by the partition lock (see the module doc).
        unsafe { &mut *self.base.add(index as usize) }
    }

    /// This backend's slot index, if it has one (every regular backend does).
    pub(super) fn mine(&self) -> Option<i32> {
        let index = version::my_proc_number();
        (index < self.len).then_some(index as i32)
    }

    /// Puts slot `me` at the end of `line` asking for `asked` (caller holds the partition lock).
    pub(super) fn enqueue(&self, line: &mut Line, me: i32, asked: &Asked) {
        let w = self.get(me);
        w.next = NONE;
        w.state = State::Waiting;
        w.database = asked.database;
        w.role = asked.role;
        w.ttl = asked.ttl;
        w.wake_at = Timestamp::MAX;
        w.key_len = asked.key.len() as u16;
        w.key[..asked.key.len()].copy_from_slice(asked.key.as_bytes());
        w.owner_len = asked.owner.len() as u16;
        w.owner[..asked.owner.len()].copy_from_slice(asked.owner.as_bytes());
        if line.last == NONE {
            line.first = me;
        } else {
            self.get(line.last).next = me;
        }
        line.last = me;
    }

    /// Takes the first waiter out of `line` (caller holds the partition lock).
    pub(super) fn pop(&self, line: &mut Line) -> Option<i32> {
        let first = line.first;
        if first == NONE {
            return None;
        }
        line.first = self.get(first).next;
        if line.first == NONE {
            line.last = NONE;
        }
        self.get(first).next = NONE;
        Some(first)
    }

    /// Puts slot `index` back at the head of `line` (caller holds the partition lock).
    pub(super) fn push_front(&self, line: &mut Line, index: i32) {
        self.get(index).next = line.first;
        line.first = index;
        if line.last == NONE {
            line.last = index;
        }
    }

    /// Takes slot `me` out of `line` wherever it is (a wait that ended); whether it
    /// was first (caller holds the partition lock).
    pub(super) fn remove(&self, line: &mut Line, me: i32) -> bool {
        if line.first == me {
            self.pop(line);
            return true;
        }
        let mut at = line.first;
        while at != NONE {
            let next = self.get(at).next;
            if next == me {
                self.get(at).next = self.get(me).next;
                if line.last == me {
                    line.last = at;
                }
                self.get(me).next = NONE;
                return false;
            }
            at = next;
        }
        false
    }

    /// Wakes the backend of slot `index`.
    pub(super) fn wake(&self, index: i32) {
        // SAFETY: slot indexes are proc numbers; the proc array lives as long as the postmaster.
        unsafe {
            let proc = (*pg_sys::ProcGlobal).allProcs.add(index as usize);
            pg_sys::SetLatch(&mut (*proc).procLatch);
        }
    }
}

/// One slot per backend that can run SQL.
fn count() -> usize {
    // SAFETY: MaxBackends is set before shared memory is sized.
    unsafe { pg_sys::MaxBackends.max(1) as usize }
}
