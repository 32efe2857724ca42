//! Which key locks a call takes. Every read-decide-write on a key holds its key lock; taking a
//! key shared without a semaphore's count changes nothing other shared takers depend on, so
//! those take it in share mode and proceed side by side (a reader's commit no longer waits for
//! another's), while anyone who takes the key exclusively, counts permits or hands it over waits
//! for all of them. Shared takers also take their holder lock (the key and owner) exclusively,
//! so that calls of one owner on one key still happen one at a time.

use crate::locks::key as keylock;
use dlock_core::Timestamp;
use dlock_core::key::key_hash;
use dlock_core::lease::{Kind, Request};
use std::cell::RefCell;
use std::collections::HashSet;

/// The locks of one call on one key.
#[derive(Clone, Copy)]
pub struct Locking {
    hash: u64,
    /// The holder lock, in share mode only.
    holder: Option<u64>,
}

/// Whether `request` may take its key lock in share mode.
fn shares_key(request: &Request) -> bool {
    request.kind == Kind::Shared && request.max_holders.is_none()
}

/// The holder lock's hash: the key and the owner (no key or owner contains a NUL).
fn holder_hash(key: &str, owner: &str) -> u64 {
    key_hash(&format!("{key}\u{0}{owner}"))
}

impl Locking {
    /// The locks `request` takes on `key` (hash `hash`) for `owner`.
    pub fn of(key: &str, hash: u64, owner: &str, request: &Request) -> Locking {
        Locking { hash, holder: shares_key(request).then(|| holder_hash(key, owner)) }
    }

    /// The share-mode locks of a release of `owner`'s shared lease of `key`.
    pub fn shared_release(key: &str, hash: u64, owner: &str) -> Locking {
        Locking { hash, holder: Some(holder_hash(key, owner)) }
    }

    /// Whether the key lock is taken in share mode.
    pub fn shares(&self) -> bool {
        self.holder.is_some()
    }

    /// Takes them, at once or not at all for a try, else no later than `until`; whether it did.
    pub fn take(&self, until: Option<Timestamp>, try_only: bool) -> bool {
        let key = match (self.holder.is_some(), try_only) {
            (false, true) => keylock::try_lock_key(self.hash),
            (false, false) => keylock::lock_key_until(self.hash, until),
            (true, true) => keylock::try_lock_key_shared(self.hash),
            (true, false) => keylock::lock_key_shared_until(self.hash, until),
        };
        let Some(holder) = self.holder.filter(|_| key) else { return key };
        let got =
            if try_only { keylock::try_lock_key(holder) } else { keylock::lock_key_until(holder, until) };
        if !got {
            keylock::unlock_key(self.hash);
        }
        got
    }

    /// An attempt changed nothing and gave the key lock back: the holder lock goes too.
    pub fn after_nothing_changed(&self) {
        if let Some(holder) = self.holder {
            keylock::unlock_key(holder);
        }
    }

    /// Gives everything back (nothing was changed).
    pub fn give_back(&self) {
        keylock::unlock_key(self.hash);
        self.after_nothing_changed();
    }
}

thread_local! {
    /// Holder-lock hashes (key and owner) of shared leases this session took, so that their
    /// release can take the key lock in share mode too. A stale entry (the lease expired, the
    /// grant rolled back, two pairs with one hash) only sends a release the share way first,
    /// which finds no shared lease of its own to delete and goes the exclusive way.
    static SHARED_HERE: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// Most entries kept: beyond, the set starts again (releases then go the exclusive way).
const SHARED_HERE_MAX: usize = 10_000;

/// Notes that this session took `owner`'s shared lease of `key` (with share-mode locks).
pub fn note_shared(key: &str, owner: &str) {
    SHARED_HERE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= SHARED_HERE_MAX {
            s.clear();
        }
        s.insert(holder_hash(key, owner));
    });
}

/// Whether this session took `owner`'s shared lease of `key`; forgets it. (Nothing to hash
/// while the session took none: the common exclusive release pays one emptiness check.)
pub fn take_shared(key: &str, owner: &str) -> bool {
    SHARED_HERE.with(|s| {
        let mut s = s.borrow_mut();
        !s.is_empty() && s.remove(&holder_hash(key, owner))
    })
}
