//! The checker against hand-made histories: each violation is found, and fencing at work is not one.

use super::*;
use crate::check::BoundKill;
use crate::history::Release;

fn grant(owner: &str, fence: i64, granted_by: f64, live_until: f64) -> Grant {
    Grant {
        worker: owner.into(),
        owner: owner.into(),
        key: "k".into(),
        fence,
        requested_at: Some(granted_by - 0.01),
        granted_by,
        live_until,
        ..Grant::default()
    }
}

fn released(mut g: Grant, at: f64) -> Grant {
    g.releases.push(Release { ok: Some(true), lb: Some(at), ub: Some(at + 0.001) });
    g
}

#[test]
fn a_clean_hand_over_passes() {
    let grants = [released(grant("a", 1, 10.0, 12.0), 11.0), released(grant("b", 2, 11.01, 13.0), 12.0)];
    assert!(check(&grants, &[], &[], &[], &[]).violations.is_empty());
}

#[test]
fn two_holders_at_once_are_found() {
    let grants = [grant("a", 1, 10.0, 12.0), released(grant("b", 2, 11.0, 13.0), 12.5)];
    let out = check(&grants, &[], &[], &[], &[]);
    assert!(out.violations.iter().any(|v| v.contains("two holders")), "{:?}", out.violations);
}

#[test]
fn a_fence_granted_before_a_smaller_one_was_requested_is_found() {
    let grants = [released(grant("a", 5, 20.0, 22.0), 20.5), released(grant("b", 6, 10.0, 12.0), 10.5)];
    let out = check(&grants, &[], &[], &[], &[]);
    assert!(out.violations.iter().any(|v| v.contains("out of grant order")), "{:?}", out.violations);
}

#[test]
fn a_write_refused_while_the_lease_was_live_is_found() {
    let grants = [grant("a", 1, 10.0, 12.0)];
    let refused = [Refused { key: "k".into(), fence: 1, owner: "a".into(), newest: Some(2), at: 11.0 }];
    let out = check(&grants, &[], &refused, &[], &[]);
    assert!(out.violations.iter().any(|v| v.contains("was refused")), "{:?}", out.violations);
}

#[test]
fn a_late_write_refused_after_expiry_is_fencing_at_work() {
    let grants = [grant("a", 1, 10.0, 12.0)];
    let refused = [Refused { key: "k".into(), fence: 1, owner: "a".into(), newest: Some(2), at: 13.0 }];
    let out = check(&grants, &[], &refused, &[], &[]);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.late_writes_refused, 1);
}

#[test]
fn a_grant_missing_after_a_crash_is_found() {
    let grants = [grant("a", 1, 10.0, 30.0)];
    let snapshot = Snapshot { crash_at: 11.0, read_at: 12.0, read_local: 12.0, leases: vec![] };
    let out = check(&grants, &[], &[], &[snapshot], &[]);
    assert!(out.violations.iter().any(|v| v.contains("missing after the crash")), "{:?}", out.violations);
}

#[test]
fn the_resource_taking_an_older_fence_is_found() {
    let grants = [grant("a", 1, 10.0, 12.0), grant("b", 2, 12.1, 14.0)];
    let write = |id, owner: &str, fence, at| Accepted { id, key: "k".into(), fence, owner: owner.into(), at };
    let accepted = [write(1, "b", 2, 12.2), write(2, "a", 1, 12.3)];
    let out = check(&grants, &accepted, &[], &[], &[]);
    assert!(out.violations.iter().any(|v| v.contains("after fence 2")), "{:?}", out.violations);
}

fn bound_kill(at: f64, probe: Option<bool>) -> BoundKill {
    BoundKill { worker: "a".into(), key: "k".into(), fence: 1, at, local: at, probe }
}

#[test]
fn a_session_bound_key_passing_on_at_once_after_a_kill_passes() {
    let mut a = grant("a", 1, 10.0, 10.5);
    a.bound = true;
    let grants = [a, released(grant("b", 2, 11.02, 13.0), 11.5)];
    let mut out = check(&grants, &[], &[], &[], &[]);
    bound_kills(&grants, &[bound_kill(11.0, Some(true))], &[], &[], &mut out);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.bound_kill_delays.len(), 1);
    assert!((out.bound_kill_delays[0] - 0.02).abs() < 1e-9);
}

#[test]
fn a_session_bound_key_stuck_after_its_holder_was_killed_is_found() {
    let mut a = grant("a", 1, 10.0, 10.5);
    a.bound = true;
    let late = [a.clone(), released(grant("b", 2, 17.0, 18.0), 17.5)];
    let mut out = check(&late, &[], &[], &[], &[]);
    bound_kills(&late, &[bound_kill(11.0, Some(false))], &[], &[], &mut out);
    assert!(out.violations.iter().any(|v| v.contains("next grant came only")), "{:?}", out.violations);
    let never = [a];
    let mut out = check(&never, &[], &[], &[], &[]);
    bound_kills(&never, &[bound_kill(11.0, Some(false))], &[], &[], &mut out);
    assert!(out.violations.iter().any(|v| v.contains("nobody got the key")), "{:?}", out.violations);
    // The probe cut short by a crash: not judged.
    let mut out = check(&never, &[], &[], &[], &[]);
    bound_kills(&never, &[bound_kill(11.0, None)], &[], &[], &mut out);
    assert!(out.violations.is_empty() && out.bound_kills_unjudged == 1, "{:?}", out.violations);
}

#[test]
fn a_session_bound_key_passed_on_before_the_kill_is_explained_or_listed() {
    let mut a = grant("a", 1, 10.0, 10.5);
    a.bound = true;
    let grants = [a, released(grant("b", 2, 10.8, 13.0), 11.5)];
    let mut out = check(&grants, &[], &[], &[], &[]);
    bound_kills(&grants, &[bound_kill(11.0, Some(true))], &[(10.7, vec!["chaos-a".into()])], &[], &mut out);
    assert_eq!((out.bound_lost_terminated, out.bound_lost_unexplained.len()), (1, 0));
    let mut out = check(&grants, &[], &[], &[], &[]);
    bound_kills(
        &grants,
        &[bound_kill(11.0, Some(true))],
        &[(10.7, vec!["chaos-a-data".into()])],
        &[],
        &mut out,
    );
    assert_eq!((out.bound_lost_terminated, out.bound_lost_unexplained.len()), (0, 1));
    assert!(out.bound_kill_delays.is_empty() && out.violations.is_empty(), "{:?}", out.violations);
}

#[test]
fn in_fast_mode_a_lease_lost_to_a_crash_is_by_design_but_overlap_is_still_found() {
    let snapshot = || Snapshot { crash_at: 11.0, read_at: 11.5, read_local: 11.5, leases: vec![] };
    // Alive across the crash, gone after it, and its release answers false: durable mode calls
    // both a lost grant; fast mode forgets leases in a crash by design.
    let mut lost = grant("a", 1, 10.0, 13.0);
    lost.releases.push(Release { ok: Some(false), lb: Some(12.0), ub: Some(12.001) });
    let durable = check(std::slice::from_ref(&lost), &[], &[], &[snapshot()], &[]);
    assert!(
        durable.violations.iter().any(|v| v.contains("missing after the crash")),
        "{:?}",
        durable.violations
    );
    assert!(durable.violations.iter().any(|v| v.contains("was lost")), "{:?}", durable.violations);
    // The same lease taken in fast mode.
    lost.fast = true;
    let fast = check(std::slice::from_ref(&lost), &[], &[], &[snapshot()], &[]);
    assert!(fast.violations.is_empty(), "{:?}", fast.violations);

    // But a key granted again while the old lease still ran (no lock-delay) is two holders.
    let early = Grant { fast: true, ..released(grant("b", 2, 11.6, 14.0), 13.5) };
    let fast = check(&[lost.clone(), early], &[], &[], &[snapshot()], &[]);
    assert!(fast.violations.iter().any(|v| v.contains("two holders")), "{:?}", fast.violations);

    // A release answering false with no crash in the lease's life is still a loss.
    let mut unexplained = Grant { fast: true, ..grant("c", 3, 20.0, 23.0) };
    unexplained.releases.push(Release { ok: Some(false), lb: Some(21.0), ub: Some(21.001) });
    let fast = check(&[unexplained], &[], &[], &[snapshot()], &[]);
    assert!(fast.violations.iter().any(|v| v.contains("was lost")), "{:?}", fast.violations);
}
