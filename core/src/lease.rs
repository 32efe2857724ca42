//! The lease rules of the contract as pure functions: given the state of a key (read under its
//! key lock) and the caller, decide what a call answers and what it changes. No I/O here, so
//! every rule is unit-tested without a server.

use crate::time::{INFINITY, Micros, Timestamp, expiry};

/// One row of the lease table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    /// The role that took the lease (its OID).
    pub role: u32,
    pub fence: i64,
    pub hold_count: i32,
    pub acquired_at: Timestamp,
    /// [`INFINITY`] for a session-bound lease.
    pub expires_at: Timestamp,
    /// The backend that last acquired it; for a session-bound lease, the session it is bound to.
    pub holder_pid: i32,
}

impl Lease {
    /// A session-bound lease (`ttl NULL`) never expires; it ends with its session.
    pub fn is_session_bound(&self) -> bool {
        self.expires_at == INFINITY
    }

    /// Its TTL has not run out at `now` (a lease is dead at its `expires_at`, not after).
    pub fn unexpired_at(&self, now: Timestamp) -> bool {
        self.expires_at > now
    }
}

/// Who is calling: the role the call runs for and the owner string it presents.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub role: u32,
    pub owner: &'a str,
    /// Member of `dlock_admin` or superuser.
    pub admin: bool,
}

/// The state of a key as the store sees it, liveness already decided.
#[derive(Debug, Clone, Copy)]
pub enum Current<'a> {
    /// No row.
    Free,
    /// A row whose lease expired or whose session ended: free for the next acquirer.
    Dead,
    /// A lease someone holds.
    Live(&'a Lease),
}

/// What `dlock_acquire` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// A new lease with a fresh fence (inserted, or replacing a dead row).
    Grant { expires_at: Timestamp },
    /// The holder again: same fence, one more hold; `bind_session` when a TTL lease becomes
    /// session-bound (reentered with `ttl NULL`) and must be tied to the caller's session.
    Reenter { fence: i64, expires_at: Timestamp, bind_session: bool },
    /// Not now: held by someone else, or others queue for it first.
    Busy(Blocker),
}

/// What a busy key waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocker {
    /// A TTL lease, dead at this time unless renewed.
    Expiry(Timestamp),
    /// A session-bound lease: its release or the end of the session bound to this fence.
    Session(i64),
    /// Other sessions queue for the key first.
    Queue,
}

/// What `dlock_renew` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    /// New `expires_at` to store and return.
    Extend(Timestamp),
    /// Session-bound: nothing to extend; answers `'infinity'`.
    SessionBound,
    /// Not the holder, expired or unknown: `NULL`, nothing changes.
    NotHeld,
    /// The right owner string from another role: 42501.
    Forbidden,
}

/// What `dlock_release` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// One hold fewer; the lease stays.
    Decrement,
    /// Last hold: the key becomes free.
    Free,
    /// Not the holder, expired or unknown: `false`, nothing changes.
    NotHeld,
    /// The right owner string from another role: 42501.
    Forbidden,
}

/// How the caller stands to a live lease for renew and release.
enum Standing {
    Holder,
    ForeignRole,
    Stranger,
}

fn standing(lease: &Lease, caller: &Caller) -> Standing {
    if lease.owner != caller.owner {
        Standing::Stranger
    } else if lease.role == caller.role || caller.admin {
        Standing::Holder
    } else {
        Standing::ForeignRole
    }
}

/// Rules 1–5 and 7 of the contract. Reentry needs the same owner string *and* role.
/// `queue_ahead`: other sessions already wait for this key, so a newcomer must not take it
/// from under them (it waits too, or gets NULL); the holder's reentry never queues.
pub fn acquire(
    current: Current,
    caller: &Caller,
    ttl: Option<Micros>,
    now: Timestamp,
    queue_ahead: bool,
) -> Acquire {
    let expires_at = expiry(now, ttl);
    match current {
        Current::Free | Current::Dead if queue_ahead => Acquire::Busy(Blocker::Queue),
        Current::Free | Current::Dead => Acquire::Grant { expires_at },
        Current::Live(lease) if lease.owner == caller.owner && lease.role == caller.role => {
            Acquire::Reenter {
                fence: lease.fence,
                expires_at: lease.expires_at.max(expires_at),
                bind_session: ttl.is_none() && !lease.is_session_bound(),
            }
        }
        Current::Live(lease) => Acquire::Busy(if lease.is_session_bound() {
            Blocker::Session(lease.fence)
        } else {
            Blocker::Expiry(lease.expires_at)
        }),
    }
}

/// `dlock_renew`: the holder of a live lease sets `expires_at = now + ttl`.
pub fn renew(current: Current, caller: &Caller, ttl: Micros, now: Timestamp) -> Renew {
    let Current::Live(lease) = current else {
        return Renew::NotHeld;
    };
    match standing(lease, caller) {
        Standing::Holder if lease.is_session_bound() => Renew::SessionBound,
        Standing::Holder => Renew::Extend(expiry(now, Some(ttl))),
        Standing::ForeignRole => Renew::Forbidden,
        Standing::Stranger => Renew::NotHeld,
    }
}

/// `dlock_release`: the holder of a live lease gives up one hold.
pub fn release(current: Current, caller: &Caller) -> Release {
    let Current::Live(lease) = current else {
        return Release::NotHeld;
    };
    match standing(lease, caller) {
        Standing::Holder if lease.hold_count > 1 => Release::Decrement,
        Standing::Holder => Release::Free,
        Standing::ForeignRole => Release::Forbidden,
        Standing::Stranger => Release::NotHeld,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = 1_000_000_000;

    fn lease(owner: &str, role: u32, expires_at: Timestamp) -> Lease {
        Lease {
            owner: owner.into(),
            role,
            fence: 7,
            hold_count: 1,
            acquired_at: NOW - 10,
            expires_at,
            holder_pid: 42,
        }
    }

    fn caller(owner: &str, role: u32) -> Caller<'_> {
        Caller { role, owner, admin: false }
    }

    #[test]
    fn free_key_is_granted_with_server_side_expiry() {
        let got = acquire(Current::Free, &caller("a", 1), Some(5), NOW, false);
        assert_eq!(got, Acquire::Grant { expires_at: NOW + 5 });
    }

    #[test]
    fn dead_lease_is_taken_over() {
        let got = acquire(Current::Dead, &caller("b", 1), None, NOW, false);
        assert_eq!(got, Acquire::Grant { expires_at: INFINITY });
    }

    #[test]
    fn newcomers_do_not_barge_past_waiters_but_holders_reenter() {
        let c = caller("a", 1);
        assert_eq!(acquire(Current::Free, &c, Some(5), NOW, true), Acquire::Busy(Blocker::Queue));
        assert_eq!(acquire(Current::Dead, &c, Some(5), NOW, true), Acquire::Busy(Blocker::Queue));
        let held = lease("a", 1, NOW + 100);
        assert!(matches!(acquire(Current::Live(&held), &c, Some(5), NOW, true), Acquire::Reenter { .. }));
    }

    #[test]
    fn lease_expires_exactly_at_its_expiry() {
        assert!(lease("a", 1, NOW + 1).unexpired_at(NOW));
        assert!(!lease("a", 1, NOW).unexpired_at(NOW));
    }

    #[test]
    fn reentry_keeps_fence_and_never_shortens() {
        let held = lease("a", 1, NOW + 100);
        let got = acquire(Current::Live(&held), &caller("a", 1), Some(5), NOW, false);
        assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: NOW + 100, bind_session: false });
        let got = acquire(Current::Live(&held), &caller("a", 1), Some(500), NOW, false);
        assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: NOW + 500, bind_session: false });
    }

    #[test]
    fn reentry_without_ttl_binds_the_lease_to_the_session() {
        let held = lease("a", 1, NOW + 100);
        let got = acquire(Current::Live(&held), &caller("a", 1), None, NOW, false);
        assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: INFINITY, bind_session: true });
        let bound = lease("a", 1, INFINITY);
        let got = acquire(Current::Live(&bound), &caller("a", 1), None, NOW, false);
        assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: INFINITY, bind_session: false });
    }

    #[test]
    fn live_lease_of_another_owner_or_role_is_busy() {
        let held = lease("a", 1, NOW + 100);
        let busy = Acquire::Busy(Blocker::Expiry(NOW + 100));
        assert_eq!(acquire(Current::Live(&held), &caller("b", 1), Some(5), NOW, false), busy);
        assert_eq!(acquire(Current::Live(&held), &caller("a", 2), Some(5), NOW, false), busy);
        let admin = Caller { admin: true, ..caller("a", 2) };
        assert_eq!(acquire(Current::Live(&held), &admin, Some(5), NOW, false), busy);
        let bound = lease("a", 1, INFINITY);
        let got = acquire(Current::Live(&bound), &caller("b", 1), Some(5), NOW, false);
        assert_eq!(got, Acquire::Busy(Blocker::Session(7)));
    }

    #[test]
    fn renew_sets_expiry_from_now_for_the_holder_only() {
        let held = lease("a", 1, NOW + 100);
        assert_eq!(renew(Current::Live(&held), &caller("a", 1), 5, NOW), Renew::Extend(NOW + 5));
        assert_eq!(renew(Current::Live(&held), &caller("b", 1), 5, NOW), Renew::NotHeld);
        assert_eq!(renew(Current::Live(&held), &caller("a", 2), 5, NOW), Renew::Forbidden);
        let admin = Caller { admin: true, ..caller("a", 2) };
        assert_eq!(renew(Current::Live(&held), &admin, 5, NOW), Renew::Extend(NOW + 5));
        assert_eq!(renew(Current::Dead, &caller("a", 1), 5, NOW), Renew::NotHeld);
        assert_eq!(renew(Current::Free, &caller("a", 1), 5, NOW), Renew::NotHeld);
        let bound = lease("a", 1, INFINITY);
        assert_eq!(renew(Current::Live(&bound), &caller("a", 1), 5, NOW), Renew::SessionBound);
    }

    #[test]
    fn release_counts_holds_and_refuses_others() {
        let mut held = lease("a", 1, NOW + 100);
        assert_eq!(release(Current::Live(&held), &caller("a", 1)), Release::Free);
        held.hold_count = 2;
        assert_eq!(release(Current::Live(&held), &caller("a", 1)), Release::Decrement);
        assert_eq!(release(Current::Live(&held), &caller("b", 1)), Release::NotHeld);
        assert_eq!(release(Current::Live(&held), &caller("a", 2)), Release::Forbidden);
        assert_eq!(release(Current::Dead, &caller("a", 1)), Release::NotHeld);
    }
}
