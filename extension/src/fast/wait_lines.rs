//! Fast mode's wait queues: a FIFO line of waiters per key, in shared memory. Each backend has
//! one waiter slot (by proc number) holding its request; a key's entry links the slots of its
//! waiters, first to last. Whoever releases a key grants it to the first waiter in place, under
//! the key's partition lock, and sets that one backend's latch: one wake-up per release, in
//! arrival order. Every slot and link is read and written under the partition lock of the key
//! the slot waits on.
//!
//! So the slots are reached only through [`Waiters`], part of a partition's guard
//! (`lease_table.rs`'s `Partition`): having one proves that a partition lock is held. That it is
//! the right partition is the rule above, not a type: a key's line links only slots waiting on
//! that key, and a backend touches its own slot only under the lock of the key it asks for.

use crate::pg::proc::Proc;
use crate::pg::version;
use dlock_core::limits::{MAX_FAST_KEY_BYTES as MAX_KEY_BYTES, MAX_FAST_OWNER_BYTES as MAX_OWNER_BYTES};
use dlock_core::{Micros, Share, Timestamp};
use pgrx::pg_sys;
use std::marker::PhantomData;

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

/// Where the waiter slots lie, one per backend, in shared memory: set up by the postmaster, then
/// never changed. Their contents are reached through [`Waiters`].
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

    /// This backend's slot index, if it has one (every regular backend does).
    pub(super) fn mine(&self) -> Option<i32> {
        let index = version::my_proc_number();
        (index < self.len).then_some(index as i32)
    }

    /// Wakes the backend of slot `index`.
    pub(super) fn wake(&self, index: i32) {
        // Slot indexes are proc numbers.
        if let Some(proc) = Proc::by_number(index as usize) {
            proc.set_latch();
        }
    }

    /// The slots, while a partition lock is held.
    ///
    /// # Safety
    /// The caller holds a partition lock for as long as the result lives, and makes no other
    /// `Waiters` meanwhile.
    pub(super) unsafe fn locked(&self) -> Waiters<'_> {
        Waiters { slots: self, _held: PhantomData }
    }
}

/// The waiter slots while this backend holds a partition lock: made only with one held
/// (`Slots::locked`), so `&mut` to it proves that nothing else in this backend reaches the slots
/// meanwhile, and nothing in another backend reaches those of this partition's lines.
pub(super) struct Waiters<'p> {
    slots: &'p Slots,
    /// Held by this process: never sent to another thread.
    _held: PhantomData<*mut ()>,
}

impl Waiters<'_> {
    fn at(&self, index: i32) -> *mut Waiter {
        let len = self.slots.len;
        assert!(index >= 0 && (index as usize) < len, "dlock: fast waiter slot {index} out of range");
        // SAFETY: in range.
        unsafe { self.slots.base.add(index as usize) }
    }

    /// Slot `index` (one waiting on a key of the partition, or this backend's own).
    pub(super) fn get(&self, index: i32) -> &Waiter {
        // SAFETY: a slot; the partition lock is held, and `self` borrowed for as long as the
        // slot (see the module doc).
        unsafe { &*self.at(index) }
    }

    /// Slot `index`, to change (one waiting on a key of the partition, or this backend's own).
    pub(super) fn get_mut(&mut self, index: i32) -> &mut Waiter {
        // SAFETY: a slot; the partition lock is held, and `self` borrowed mutably for as long as
        // the slot (see the module doc).
        unsafe { &mut *self.at(index) }
    }

    /// Wakes the backend of slot `index`.
    pub(super) fn wake(&self, index: i32) {
        self.slots.wake(index);
    }

    /// Puts slot `me` at the end of `line` asking for `asked`.
    pub(super) fn enqueue(&mut self, line: &mut Line, me: i32, asked: &Asked) {
        let w = self.get_mut(me);
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
            self.get_mut(line.last).next = me;
        }
        line.last = me;
    }

    /// Takes the first waiter out of `line`.
    pub(super) fn pop(&mut self, line: &mut Line) -> Option<i32> {
        let first = line.first;
        if first == NONE {
            return None;
        }
        line.first = self.get(first).next;
        if line.first == NONE {
            line.last = NONE;
        }
        self.get_mut(first).next = NONE;
        Some(first)
    }

    /// Puts slot `index` back at the head of `line`.
    pub(super) fn push_front(&mut self, line: &mut Line, index: i32) {
        self.get_mut(index).next = line.first;
        line.first = index;
        if line.last == NONE {
            line.last = index;
        }
    }

    /// Takes slot `me` out of `line` wherever it is (a wait that ended); whether it
    /// was first.
    pub(super) fn remove(&mut self, line: &mut Line, me: i32) -> bool {
        if line.first == me {
            self.pop(line);
            return true;
        }
        let mut at = line.first;
        while at != NONE {
            let next = self.get(at).next;
            if next == me {
                self.get_mut(at).next = self.get(me).next;
                if line.last == me {
                    line.last = at;
                }
                self.get_mut(me).next = NONE;
                return false;
            }
            at = next;
        }
        false
    }
}

/// One slot per backend that can run SQL.
fn count() -> usize {
    // SAFETY: MaxBackends is set before shared memory is sized.
    unsafe { pg_sys::MaxBackends.max(1) as usize }
}
