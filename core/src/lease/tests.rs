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
        kind: Kind::Exclusive,
        max_holders: None,
        lock_delay: 0,
        info: None,
    }
}

fn shared(owner: &str, fence: i64, expires_at: Timestamp, max_holders: Option<i32>) -> Lease {
    Lease { kind: Kind::Shared, fence, max_holders, ..lease(owner, 1, expires_at) }
}

fn caller(owner: &str, role: u32) -> Caller<'_> {
    Caller { role, owner, admin: false }
}

fn live<'a>(leases: &'a [&'a Lease]) -> KeyState<'a> {
    KeyState { live: leases.to_vec(), ..KeyState::free() }
}

fn x(ttl: Option<Micros>) -> Request {
    Request::exclusive(ttl)
}

fn s(ttl: Option<Micros>, max_holders: Option<i32>) -> Request {
    Request { kind: Kind::Shared, max_holders, ttl, lock_delay: 0 }
}

#[test]
fn free_key_is_granted_with_server_side_expiry() {
    assert_eq!(
        acquire(&KeyState::free(), &caller("a", 1), &x(Some(5)), NOW, false),
        Acquire::Grant { expires_at: NOW + 5 }
    );
    assert_eq!(
        acquire(&KeyState::free(), &caller("a", 1), &s(None, None), NOW, false),
        Acquire::Grant { expires_at: INFINITY }
    );
}

#[test]
fn newcomers_do_not_barge_past_waiters_but_holders_reenter() {
    let c = caller("a", 1);
    assert_eq!(acquire(&KeyState::free(), &c, &x(Some(5)), NOW, true), Acquire::Busy(Blocker::Queue));
    let held = lease("a", 1, NOW + 100);
    assert!(matches!(acquire(&live(&[&held]), &c, &x(Some(5)), NOW, true), Acquire::Reenter { .. }));
}

#[test]
fn lease_expires_exactly_at_its_expiry() {
    assert!(lease("a", 1, NOW + 1).unexpired_at(NOW));
    assert!(!lease("a", 1, NOW).unexpired_at(NOW));
}

#[test]
fn reentry_keeps_fence_and_never_shortens() {
    let held = lease("a", 1, NOW + 100);
    let got = acquire(&live(&[&held]), &caller("a", 1), &x(Some(5)), NOW, false);
    assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: NOW + 100, bind_session: false });
    let got = acquire(&live(&[&held]), &caller("a", 1), &x(Some(500)), NOW, false);
    assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: NOW + 500, bind_session: false });
}

#[test]
fn reentry_without_ttl_binds_the_lease_to_the_session() {
    let held = lease("a", 1, NOW + 100);
    let got = acquire(&live(&[&held]), &caller("a", 1), &x(None), NOW, false);
    assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: INFINITY, bind_session: true });
    let bound = lease("a", 1, INFINITY);
    let got = acquire(&live(&[&bound]), &caller("a", 1), &x(None), NOW, false);
    assert_eq!(got, Acquire::Reenter { fence: 7, expires_at: INFINITY, bind_session: false });
}

#[test]
fn live_lease_of_another_owner_or_role_is_busy() {
    let held = lease("a", 1, NOW + 100);
    let busy = Acquire::Busy(Blocker::Expiry(NOW + 100));
    assert_eq!(acquire(&live(&[&held]), &caller("b", 1), &x(Some(5)), NOW, false), busy);
    assert_eq!(acquire(&live(&[&held]), &caller("a", 2), &x(Some(5)), NOW, false), busy);
    let admin = Caller { admin: true, ..caller("a", 2) };
    assert_eq!(acquire(&live(&[&held]), &admin, &x(Some(5)), NOW, false), busy);
    let bound = lease("a", 1, INFINITY);
    assert_eq!(
        acquire(&live(&[&bound]), &caller("b", 1), &x(Some(5)), NOW, false),
        Acquire::Busy(Blocker::Session(7))
    );
}

#[test]
fn exclusive_and_shared_exclude_each_other_and_shared_holders_share() {
    let (r1, r2) = (shared("r1", 10, NOW + 100, None), shared("r2", 11, NOW + 300, None));
    // Readers beside readers.
    assert_eq!(
        acquire(&live(&[&r1]), &caller("r2", 1), &s(Some(5), None), NOW, false),
        Acquire::Grant { expires_at: NOW + 5 }
    );
    // A writer waits for every reader: until the last expiry, releases wake it sooner.
    assert_eq!(
        acquire(&live(&[&r1, &r2]), &caller("w", 1), &x(Some(5)), NOW, false),
        Acquire::Busy(Blocker::Expiry(NOW + 300))
    );
    // A reader waits for the writer.
    let w = lease("w", 1, NOW + 50);
    assert_eq!(
        acquire(&live(&[&w]), &caller("r", 1), &s(Some(5), None), NOW, false),
        Acquire::Busy(Blocker::Expiry(NOW + 50))
    );
    // Leaders exclude like exclusive leases.
    let leader = Lease { kind: Kind::Leader, ..lease("l", 1, NOW + 80) };
    assert_eq!(
        acquire(&live(&[&leader]), &caller("r", 1), &s(Some(5), None), NOW, false),
        Acquire::Busy(Blocker::Expiry(NOW + 80))
    );
}

#[test]
fn a_writer_waits_on_a_session_bound_reader_first() {
    let (r1, r2) = (shared("r1", 10, NOW + 100, None), shared("r2", 11, INFINITY, None));
    assert_eq!(
        acquire(&live(&[&r1, &r2]), &caller("w", 1), &x(Some(5)), NOW, false),
        Acquire::Busy(Blocker::Session(11))
    );
}

#[test]
fn no_silent_upgrade_or_downgrade() {
    let r = shared("a", 10, NOW + 100, None);
    assert_eq!(
        acquire(&live(&[&r]), &caller("a", 1), &x(Some(5)), NOW, false),
        Acquire::ModeConflict { held: Kind::Shared }
    );
    let w = lease("a", 1, NOW + 100);
    assert_eq!(
        acquire(&live(&[&w]), &caller("a", 1), &s(Some(5), None), NOW, false),
        Acquire::ModeConflict { held: Kind::Exclusive }
    );
    // A lock and an election of the same name are not one another: a leader campaigning again
    // reenters, a lock holder campaigning (or a leader locking) is refused.
    let leader = Lease { kind: Kind::Leader, ..lease("a", 1, NOW + 100) };
    assert_eq!(
        acquire(&live(&[&leader]), &caller("a", 1), &x(Some(5)), NOW, false),
        Acquire::ModeConflict { held: Kind::Leader }
    );
    let campaign = Request { kind: Kind::Leader, ..x(Some(5)) };
    assert!(matches!(
        acquire(&live(&[&leader]), &caller("a", 1), &campaign, NOW, false),
        Acquire::Reenter { .. }
    ));
    assert_eq!(
        acquire(&live(&[&w]), &caller("a", 1), &campaign, NOW, false),
        Acquire::ModeConflict { held: Kind::Exclusive }
    );
}

#[test]
fn a_semaphore_grants_up_to_its_permits() {
    let (a, b) = (shared("a", 10, NOW + 100, Some(2)), shared("b", 11, NOW + 40, Some(2)));
    assert_eq!(
        acquire(&live(&[&a]), &caller("c", 1), &s(Some(5), Some(2)), NOW, false),
        Acquire::Grant { expires_at: NOW + 5 }
    );
    // Full: wait for the first permit to come back.
    assert_eq!(
        acquire(&live(&[&a, &b]), &caller("c", 1), &s(Some(5), Some(2)), NOW, false),
        Acquire::Busy(Blocker::Expiry(NOW + 40))
    );
    // Holders reenter even when full.
    assert!(matches!(
        acquire(&live(&[&a, &b]), &caller("a", 1), &s(Some(5), Some(2)), NOW, false),
        Acquire::Reenter { .. }
    ));
}

#[test]
fn participants_of_a_semaphore_must_agree_on_its_permits() {
    let a = shared("a", 10, NOW + 100, Some(2));
    assert_eq!(
        acquire(&live(&[&a]), &caller("c", 1), &s(Some(5), Some(3)), NOW, false),
        Acquire::SizeMismatch { held: Some(2) }
    );
    assert_eq!(
        acquire(&live(&[&a]), &caller("c", 1), &s(Some(5), None), NOW, false),
        Acquire::SizeMismatch { held: Some(2) }
    );
    // Also while others wait for the key: refused at once, not queued to be refused later.
    assert_eq!(
        acquire(&live(&[&a]), &caller("c", 1), &s(Some(5), Some(3)), NOW, true),
        Acquire::SizeMismatch { held: Some(2) }
    );
    assert_eq!(
        acquire(&live(&[&a]), &caller("c", 1), &s(Some(5), Some(2)), NOW, true),
        Acquire::Busy(Blocker::Queue)
    );
    assert_eq!(
        acquire(&live(&[&a]), &caller("a", 1), &s(Some(5), Some(3)), NOW, false),
        Acquire::SizeMismatch { held: Some(2) }
    );
    let unlimited = shared("u", 12, NOW + 100, None);
    assert_eq!(
        acquire(&live(&[&unlimited]), &caller("c", 1), &s(Some(5), Some(2)), NOW, false),
        Acquire::SizeMismatch { held: None }
    );
}

#[test]
fn a_lock_delay_holds_the_key_back_after_expiry_not_after_release() {
    let expired = Lease { lock_delay: 500, ..lease("a", 1, NOW - 100) };
    let state = KeyState::of(std::slice::from_ref(&expired), NOW, |l| l.unexpired_at(NOW));
    assert_eq!(state.delayed_until, Some(NOW + 400));
    assert_eq!(
        acquire(&state, &caller("b", 1), &x(Some(5)), NOW, false),
        Acquire::Busy(Blocker::Expiry(NOW + 400))
    );
    assert_eq!(
        acquire(&state, &caller("b", 1), &s(Some(5), None), NOW, false),
        Acquire::Busy(Blocker::Expiry(NOW + 400))
    );
    // Once over, the row is dead.
    let later = KeyState::of(std::slice::from_ref(&expired), NOW + 400, |l| l.unexpired_at(NOW + 400));
    assert_eq!(later.delayed_until, None);
    assert!(later.live.is_empty());
    assert!(state.counts(&expired), "a row holding the key back stays");
    assert!(!later.counts(&expired), "a row that is over may go");
    // Session-bound leases have none (they end with their session, not by expiring).
    let bound = Lease { lock_delay: 500, ..lease("a", 1, INFINITY) };
    assert_eq!(KeyState::of(std::slice::from_ref(&bound), NOW, |_| false).delayed_until, None);
}

#[test]
fn renew_sets_expiry_from_now_for_the_holder_only() {
    let held = lease("a", 1, NOW + 100);
    let holders = [&held];
    let state = live(&holders);
    assert_eq!(renew(&state, &caller("a", 1), 5, NOW), Renew::Extend(NOW + 5));
    assert_eq!(renew(&state, &caller("b", 1), 5, NOW), Renew::NotHeld);
    assert_eq!(renew(&state, &caller("a", 2), 5, NOW), Renew::Forbidden);
    let admin = Caller { admin: true, ..caller("a", 2) };
    assert_eq!(renew(&state, &admin, 5, NOW), Renew::Extend(NOW + 5));
    assert_eq!(renew(&KeyState::free(), &caller("a", 1), 5, NOW), Renew::NotHeld);
    let bound = lease("a", 1, INFINITY);
    assert_eq!(renew(&live(&[&bound]), &caller("a", 1), 5, NOW), Renew::SessionBound);
}

#[test]
fn each_shared_holder_renews_and_releases_its_own_lease() {
    let (r1, r2) = (shared("r1", 10, NOW + 100, None), shared("r2", 11, NOW + 100, None));
    let holders = [&r1, &r2];
    let state = live(&holders);
    assert_eq!(renew(&state, &caller("r2", 1), 5, NOW), Renew::Extend(NOW + 5));
    assert_eq!(release(&state, &caller("r1", 1)), Release::Free);
    assert_eq!(release(&state, &caller("r3", 1)), Release::NotHeld);
}

#[test]
fn release_counts_holds_and_refuses_others() {
    let mut held = lease("a", 1, NOW + 100);
    assert_eq!(release(&live(&[&held]), &caller("a", 1)), Release::Free);
    held.hold_count = 2;
    assert_eq!(release(&live(&[&held]), &caller("a", 1)), Release::Decrement);
    assert_eq!(release(&live(&[&held]), &caller("b", 1)), Release::NotHeld);
    assert_eq!(release(&live(&[&held]), &caller("a", 2)), Release::Forbidden);
    assert_eq!(release(&KeyState::free(), &caller("a", 1)), Release::NotHeld);
}

#[test]
fn kinds_round_trip_through_their_codes() {
    for kind in [Kind::Exclusive, Kind::Shared, Kind::Leader] {
        assert_eq!(Kind::from_code(kind.code()), Some(kind));
    }
    assert_eq!(Kind::from_code(b'?'), None);
    assert_eq!(Kind::Leader.mode(), "exclusive");
}

#[test]
fn a_key_is_free_with_no_live_lease_and_no_lock_delay() {
    assert!(KeyState::free().is_free());
    let held = lease("a", 1, NOW + 100);
    assert!(!live(&[&held]).is_free(), "held");
    let expired = Lease { lock_delay: 500, ..lease("a", 1, NOW - 100) };
    let delayed = KeyState::of(std::slice::from_ref(&expired), NOW, |l| l.unexpired_at(NOW));
    assert!(!delayed.is_free(), "held back by its lock-delay");
    let later = KeyState::of(std::slice::from_ref(&expired), NOW + 400, |l| l.unexpired_at(NOW + 400));
    assert!(later.is_free(), "the lock-delay is over");
}
