//! Session-bound leases (`ttl NULL`) of this backend, kept in step with transactions.
//!
//! Binding a lease takes a session-scoped lock at once (others must see the binding the moment
//! the grant commits), but the grant itself may still roll back; unbinding must only happen
//! once the release has committed. So binds and unbinds are *pending* until the transaction
//! (or subtransaction) that made them ends, and the callbacks below settle them.

use crate::locks::binding;
use crate::pg::pending::Pending;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Bind,
    Unbind,
}

struct Binding {
    fence: i64,
    hash: u64,
    change: Change,
}

struct State {
    /// Committed session-bound leases held by this session: fence → key hash.
    bound: HashMap<i64, u64>,
    /// Changes of the open transaction, in order.
    pending: Pending<Binding>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State { bound: HashMap::new(), pending: Pending::new() });
}

/// Binds a just-granted lease of the key with this hash to this session (undone if the
/// transaction rolls back).
pub fn bind(fence: i64, hash: u64) {
    binding::bind(fence);
    STATE.with(|s| s.borrow_mut().pending.push(Binding { fence, hash, change: Change::Bind }));
}

/// Unbinds a released lease from this session when the transaction commits.
pub fn unbind_at_commit(fence: i64, hash: u64) {
    STATE.with(|s| s.borrow_mut().pending.push(Binding { fence, hash, change: Change::Unbind }));
}

/// Key hashes of the session-bound leases this session holds.
pub fn bound_key_hashes() -> Vec<u64> {
    STATE.with(|s| s.borrow().bound.values().copied().collect())
}

/// Lets every committed binding of this session go now (the session is ending); their key
/// hashes.
pub fn unbind_all() -> Vec<u64> {
    STATE.with(|s| {
        let bound = std::mem::take(&mut s.borrow_mut().bound);
        bound
            .into_iter()
            .map(|(fence, hash)| {
                binding::unbind(fence);
                hash
            })
            .collect()
    })
}

/// Whether this session holds the binding of `fence` (committed, or made in this transaction),
/// and still has its lock: a session reset (`DISCARD ALL`) ends the binding under our feet.
pub fn is_bound_here(fence: i64) -> bool {
    let noted = STATE.with(|s| {
        let s = s.borrow();
        s.bound.contains_key(&fence) || s.pending.iter().any(|p| p.fence == fence && p.change == Change::Bind)
    });
    noted && binding::binding_held(fence)
}

/// Whether the session a session-bound lease belongs to is still there.
pub fn holder_alive(fence: i64) -> bool {
    is_bound_here(fence) || binding::bound_elsewhere(fence)
}

/// Whether the open transaction bound or unbound a lease (it cannot be prepared then).
pub fn has_pending() -> bool {
    STATE.with(|s| !s.borrow().pending.is_empty())
}

fn settle(commit: bool) {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        for p in s.pending.take() {
            match (p.change, commit) {
                (Change::Bind, true) => {
                    s.bound.insert(p.fence, p.hash);
                }
                (Change::Bind, false) => binding::unbind(p.fence),
                (Change::Unbind, true) => {
                    if s.bound.remove(&p.fence).is_some() {
                        binding::unbind(p.fence);
                    }
                }
                (Change::Unbind, false) => {}
            }
        }
    });
}

/// A subtransaction ended (`hooks/subxact.rs`): a rolled-back one's bindings go.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if commit {
            s.pending.sub_commit(sub, parent);
        } else {
            for p in s.pending.sub_abort(sub) {
                if p.change == Change::Bind {
                    binding::unbind(p.fence);
                }
            }
        }
    });
}

/// The transaction ended: its bindings and unbindings take effect (commit) or are undone.
pub fn at_end(commit: bool) {
    settle(commit);
}
