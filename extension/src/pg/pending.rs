//! Changes made in a transaction that only take effect when it commits: a list tagged by the
//! subtransaction that made each change, so that a rolled-back savepoint drops exactly its own
//! and a released one hands them to its parent. Its owner settles the list from its
//! transaction callbacks.

use pgrx::pg_sys::{self, SubTransactionId};

pub struct Pending<T> {
    changes: Vec<(T, SubTransactionId)>,
}

impl<T> Pending<T> {
    pub const fn new() -> Self {
        Pending { changes: Vec::new() }
    }

    /// Records a change made by the current subtransaction.
    pub fn push(&mut self, change: T) {
        // SAFETY: called inside a transaction.
        let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
        self.changes.push((change, sub));
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.changes.iter().map(|(c, _)| c)
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Takes out the newest change that matches.
    pub fn remove_last(&mut self, matches: impl Fn(&T) -> bool) -> Option<T> {
        let i = self.changes.iter().rposition(|(c, _)| matches(c))?;
        Some(self.changes.remove(i).0)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.changes.retain(|(c, _)| keep(c));
    }

    /// The transaction ended: every change, in order.
    pub fn take(&mut self) -> Vec<T> {
        std::mem::take(&mut self.changes).into_iter().map(|(c, _)| c).collect()
    }

    /// Subtransaction `sub` committed: its changes are its parent's now.
    pub fn sub_commit(&mut self, sub: SubTransactionId, parent: SubTransactionId) {
        for (_, owner) in &mut self.changes {
            if *owner == sub {
                *owner = parent;
            }
        }
    }

    /// Subtransaction `sub` rolled back: its changes, taken out in order, for the caller to undo.
    pub fn sub_abort(&mut self, sub: SubTransactionId) -> Vec<T> {
        let (undone, kept) =
            std::mem::take(&mut self.changes).into_iter().partition(|(_, owner)| *owner == sub);
        self.changes = kept;
        undone.into_iter().map(|(c, _)| c).collect()
    }
}
