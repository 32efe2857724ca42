//! The contract's rules (dlock_core::lease) on any lease, caller and clock: they never panic
//! (no overflow at the ends of time), and every answer is one the contract allows.
#![no_main]

use arbitrary::Arbitrary;
use dlock_core::INFINITY;
use dlock_core::lease::{self, Acquire, Blocker, Caller, Current, Lease, Release, Renew};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    state: u8,
    owner: String,
    role: u32,
    fence: i64,
    hold_count: i32,
    acquired_at: i64,
    expires_at: i64,
    session_bound: bool,
    caller_owner_same: bool,
    caller_owner: String,
    caller_role_same: bool,
    caller_role: u32,
    admin: bool,
    ttl: Option<i64>,
    renew_ttl: i64,
    now: i64,
    queue_ahead: bool,
}

fuzz_target!(|i: Input| {
    let lease = Lease {
        owner: i.owner.clone(),
        role: i.role,
        fence: i.fence,
        hold_count: i.hold_count,
        acquired_at: i.acquired_at,
        expires_at: if i.session_bound { INFINITY } else { i.expires_at.min(INFINITY - 1) },
        holder_pid: 1,
    };
    let owner = if i.caller_owner_same { i.owner.clone() } else { i.caller_owner.clone() };
    let role = if i.caller_role_same { i.role } else { i.caller_role };
    let caller = Caller { role, owner: &owner, admin: i.admin };
    let current = match i.state % 3 {
        0 => Current::Free,
        1 => Current::Dead,
        _ => Current::Live(&lease),
    };
    let ttl = i.ttl.map(|t| t.max(1));
    let same_holder = lease.owner == owner && lease.role == role;
    match lease::acquire(current, &caller, ttl, i.now, i.queue_ahead) {
        Acquire::Grant { expires_at } => {
            assert!(!matches!(current, Current::Live(_)) && !i.queue_ahead);
            match ttl {
                None => assert_eq!(expires_at, INFINITY),
                Some(_) => assert!(expires_at < INFINITY && expires_at >= i.now.min(INFINITY - 1)),
            }
        }
        Acquire::Reenter { fence, expires_at, .. } => {
            assert!(matches!(current, Current::Live(_)) && same_holder && fence == lease.fence);
            assert!(expires_at >= lease.expires_at, "a reentry never shortens the lease");
        }
        Acquire::Busy(Blocker::Queue) => assert!(i.queue_ahead && !matches!(current, Current::Live(_))),
        Acquire::Busy(Blocker::Session(f)) => {
            assert!(
                matches!(current, Current::Live(_))
                    && !same_holder
                    && lease.is_session_bound()
                    && f == lease.fence
            )
        }
        Acquire::Busy(Blocker::Expiry(t)) => {
            assert!(matches!(current, Current::Live(_)) && !same_holder && t == lease.expires_at)
        }
    }
    let renew_ttl = i.renew_ttl.max(1);
    match lease::renew(current, &caller, renew_ttl, i.now) {
        Renew::Extend(t) => {
            assert!(matches!(current, Current::Live(_)) && lease.owner == owner && t < INFINITY)
        }
        Renew::SessionBound => assert!(lease.is_session_bound() && lease.owner == owner),
        Renew::Forbidden => assert!(lease.owner == owner && lease.role != role && !i.admin),
        Renew::NotHeld => assert!(!matches!(current, Current::Live(_)) || lease.owner != owner),
    }
    match lease::release(current, &caller) {
        Release::Decrement | Release::Free => {
            assert!(
                matches!(current, Current::Live(_))
                    && lease.owner == owner
                    && (lease.role == role || i.admin)
            )
        }
        Release::Forbidden => assert!(lease.owner == owner && lease.role != role && !i.admin),
        Release::NotHeld => assert!(!matches!(current, Current::Live(_)) || lease.owner != owner),
    }
});
