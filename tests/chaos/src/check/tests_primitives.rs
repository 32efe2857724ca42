//! The checker against hand-made histories of the version 2 primitives: each violation kind is
//! found, and valid overlapping histories (readers side by side, a full semaphore, hand-overs,
//! expiries within the margin, a leader not yet visible) pass.

use super::*;
use crate::history::{Mode, MultiGrant, NotGranted, Observation, Primitive, Release, parse};

fn lease(owner: &str, key: &str, fence: i64, granted_by: f64, live_until: f64, mode: Mode) -> Grant {
    Grant {
        worker: owner.into(),
        owner: owner.into(),
        key: key.into(),
        fence,
        requested_at: Some(granted_by - 0.01),
        granted_by,
        live_until,
        mode,
        ..Grant::default()
    }
}

fn shared(owner: &str, fence: i64, granted_by: f64, live_until: f64, max: Option<i32>) -> Grant {
    Grant { max_holders: max, ..lease(owner, "s", fence, granted_by, live_until, Mode::Shared) }
}

fn released(mut g: Grant, at: f64) -> Grant {
    g.releasing_lb = Some(at);
    g.releases.push(Release { ok: Some(true), lb: Some(at), ub: Some(at + 0.001) });
    g
}

fn found(grants: &[Grant]) -> Outcome {
    check(grants, &[], &[], &[], &[])
}

fn count(out: &Outcome, rule: Rule) -> usize {
    out.by_rule.get(&rule).copied().unwrap_or(0)
}

#[test]
fn readers_side_by_side_pass() {
    let grants = [
        released(shared("a", 1, 10.0, 12.0, None), 11.0),
        released(shared("b", 2, 10.1, 12.0, None), 11.2),
        released(shared("c", 3, 10.2, 12.0, None), 11.5),
        released(shared("d", 4, 10.3, 12.0, None), 11.6),
    ];
    let out = found(&grants);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.intervals, 4);
    assert_eq!(out.per_primitive.get(&Primitive::Shared), Some(&4));
}

#[test]
fn a_full_semaphore_passes_and_one_more_holder_is_found() {
    let full = [
        released(shared("a", 1, 10.0, 12.0, Some(3)), 11.0),
        released(shared("b", 2, 10.1, 12.0, Some(3)), 11.2),
        released(shared("c", 3, 10.2, 12.0, Some(3)), 11.5),
        // Takes the permit "a" gave back.
        released(shared("d", 4, 11.01, 13.0, Some(3)), 12.0),
    ];
    let out = found(&full);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.per_primitive.get(&Primitive::Semaphore), Some(&4));
    assert_eq!(out.most_shared.get("s"), Some(&3));

    let mut over = full.to_vec();
    over[3] = released(shared("d", 4, 10.9, 13.0, Some(3)), 12.0);
    let out = found(&over);
    assert_eq!(count(&out, Rule::SemaphoreOverfull), 1, "{:?}", out.violations);
    assert!(out.violations[0].contains("4 shared holders"), "{:?}", out.violations);
}

#[test]
fn a_permit_freed_by_expiry_within_the_margin_is_no_overfull_semaphore() {
    // "a" was killed holding its permit: it lives to its expiry at 11.0. "c" came 30 ms before
    // that by the server's clock: within the slack for reading expiries.
    let grants = [
        shared("a", 1, 10.0, 11.0, Some(2)),
        released(shared("b", 2, 10.1, 12.0, Some(2)), 11.5),
        released(shared("c", 3, 10.97, 12.0, Some(2)), 11.6),
    ];
    let out = found(&grants);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    // 100 ms before it is not.
    let grants = [grants[0].clone(), grants[1].clone(), released(shared("c", 3, 10.9, 12.0, Some(2)), 11.6)];
    assert_eq!(count(&found(&grants), Rule::SemaphoreOverfull), 1);
}

#[test]
fn an_exclusive_holder_beside_a_reader_is_found() {
    let grants = [
        released(shared("a", 1, 10.0, 12.0, Some(3)), 11.0),
        released(lease("w", "s", 2, 10.5, 12.5, Mode::Exclusive), 11.5),
    ];
    let out = found(&grants);
    assert_eq!(count(&out, Rule::ExclusiveBesideShared), 1, "{:?}", out.violations);
    assert!(out.violations[0].contains("exclusive holder beside a shared one"), "{:?}", out.violations);
}

#[test]
fn a_writer_after_the_readers_left_passes() {
    let grants = [
        released(shared("a", 1, 10.0, 12.0, None), 11.0),
        released(shared("b", 2, 10.2, 12.0, None), 11.1),
        released(lease("w", "s", 3, 11.11, 13.0, Mode::Exclusive), 12.0),
        released(shared("c", 4, 12.01, 14.0, None), 12.5),
    ];
    let out = found(&grants);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
}

#[test]
fn two_leaders_at_once_are_found_and_a_lapsed_lead_passing_on_is_not() {
    let leader = |owner: &str, term, from, until| lease(owner, "e", term, from, until, Mode::Leader);
    // "a" was paused past its lease: "b" leads from after its expiry.
    let lapsed = [leader("a", 1, 10.0, 11.0), released(leader("b", 2, 11.01, 12.0), 11.5)];
    let out = found(&lapsed);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.per_primitive.get(&Primitive::Election), Some(&2));
    let overlapping = [leader("a", 1, 10.0, 11.0), released(leader("b", 2, 10.5, 12.0), 11.5)];
    let out = found(&overlapping);
    assert_eq!(count(&out, Rule::TwoLeaders), 1, "{:?}", out.violations);
}

#[test]
fn a_term_granted_before_a_smaller_one_was_requested_is_found() {
    let grants = [
        released(lease("a", "e", 6, 10.0, 12.0, Mode::Leader), 10.5),
        released(lease("b", "e", 5, 20.0, 22.0, Mode::Leader), 20.5),
    ];
    assert_eq!(count(&found(&grants), Rule::FenceOrder), 1);
}

fn seen(worker: &str, term: Option<i64>, info: &str, expires_at: f64, lb: f64, ub: f64) -> Observation {
    Observation {
        worker: worker.into(),
        election: "e".into(),
        term,
        info: term.map(|_| info.into()),
        expires_at: term.map(|_| expires_at),
        lb,
        ub,
    }
}

fn judged(grants: &[Grant], observations: &[Observation]) -> Outcome {
    let mut out = found(grants);
    elections(grants, observations, &mut out);
    out
}

#[test]
fn leader_answers_that_agree_with_the_leads_pass() {
    let grants = [
        released(lease("a", "e", 1, 10.0, 12.0, Mode::Leader), 11.0),
        released(lease("b", "e", 2, 11.1, 13.0, Mode::Leader), 12.0),
    ];
    let observations = [
        seen("x", Some(1), "a", 12.0, 10.5, 10.51),
        // Within b's lead before its grant was committed: nobody yet.
        seen("y", None, "", 0.0, 11.11, 11.12),
        seen("x", Some(2), "b", 13.0, 11.5, 11.51),
        // Overlapping answers may come in either order.
        seen("y", Some(1), "a", 12.0, 10.9, 11.3),
        seen("z", None, "", 0.0, 12.5, 12.51),
    ];
    let out = judged(&grants, &observations);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.leader_observations, 5);
}

#[test]
fn a_term_going_back_between_answers_is_found() {
    let observations =
        [seen("x", Some(7), "a", 20.0, 10.0, 10.01), seen("y", Some(6), "b", 20.0, 10.02, 10.03)];
    let out = judged(&[], &observations);
    assert_eq!(count(&out, Rule::TermOrder), 1, "{:?}", out.violations);
    assert!(out.violations[0].contains("term went back"), "{:?}", out.violations);
}

#[test]
fn an_expired_leader_shown_is_found() {
    let observations = [seen("x", Some(3), "a", 10.0, 10.5, 10.51)];
    let out = judged(&[], &observations);
    assert_eq!(count(&out, Rule::TermOrder), 1, "{:?}", out.violations);
    assert!(out.violations[0].contains("had expired"), "{:?}", out.violations);
}

#[test]
fn another_leader_shown_during_a_lead_is_found() {
    let grants = [released(lease("b", "e", 2, 11.0, 13.0, Mode::Leader), 12.0)];
    let wrong_term = [seen("x", Some(1), "a", 14.0, 11.5, 11.51)];
    assert_eq!(count(&judged(&grants, &wrong_term), Rule::TermOrder), 1);
    let wrong_info = [seen("x", Some(2), "a", 14.0, 11.5, 11.51)];
    assert_eq!(count(&judged(&grants, &wrong_info), Rule::TermOrder), 1);
}

fn all_of(
    owner: &str,
    keys: &[&str],
    fences: &[Option<i64>],
    from: f64,
    until: f64,
) -> (Vec<Grant>, MultiGrant) {
    let grants = keys
        .iter()
        .zip(fences)
        .filter_map(|(k, f)| {
            f.map(|f| Grant { multi: true, ..lease(owner, k, f, from, until, Mode::Exclusive) })
        })
        .collect();
    let multi = MultiGrant {
        worker: owner.into(),
        owner: owner.into(),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        fences: fences.to_vec(),
        granted_by: from,
        checks: Vec::new(),
    };
    (grants, multi)
}

fn judged_multi(grants: &[Grant], multi: &[MultiGrant], refused: &[NotGranted]) -> Outcome {
    let mut out = found(grants);
    multi_key(grants, multi, refused, &mut out);
    out
}

#[test]
fn overlapping_multi_key_grants_on_disjoint_keys_pass() {
    let (mut a, mut ma) = all_of("a", &["k1", "k2"], &[Some(1), Some(1)], 10.0, 12.0);
    let (b, mut mb) = all_of("b", &["k4", "k3"], &[Some(1), Some(1)], 10.1, 12.0);
    ma.checks.push((10.05, vec![true, true]));
    mb.checks.push((10.15, vec![true, true]));
    // Then "c" takes k2 and k3 once both are free.
    let a_released: Vec<Grant> = a.drain(..).map(|g| released(g, 11.0)).collect();
    let b_released: Vec<Grant> = b.into_iter().map(|g| released(g, 11.2)).collect();
    let (c, mc) = all_of("c", &["k3", "k2"], &[Some(2), Some(2)], 11.21, 13.0);
    let grants: Vec<Grant> = a_released.into_iter().chain(b_released).chain(c).collect();
    let out = judged_multi(&grants, &[ma, mb, mc], &[]);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!((out.multi_grants, out.per_primitive.get(&Primitive::MultiKey)), (3, Some(&6)));
}

#[test]
fn a_multi_key_grant_beside_another_holder_of_one_of_its_keys_is_found() {
    let (grants, multi) = all_of("a", &["k1", "k2", "k3"], &[Some(1), Some(1), Some(1)], 10.0, 12.0);
    let mut grants: Vec<Grant> = grants.into_iter().map(|g| released(g, 11.0)).collect();
    grants.push(released(lease("x", "k2", 2, 10.5, 12.0, Mode::Exclusive), 11.5));
    let out = judged_multi(&grants, std::slice::from_ref(&multi), &[]);
    assert_eq!(count(&out, Rule::TwoExclusive), 1, "{:?}", out.violations);
    // A reader on one of its keys too.
    grants.pop();
    grants.push(released(lease("r", "k3", 2, 10.5, 12.0, Mode::Shared), 11.5));
    let out = judged_multi(&grants, &[multi], &[]);
    assert_eq!(count(&out, Rule::ExclusiveBesideShared), 1, "{:?}", out.violations);
}

#[test]
fn a_partial_multi_key_grant_is_found() {
    // Answered with a NULL fence.
    let (grants, multi) = all_of("a", &["k1", "k2"], &[Some(1), None], 10.0, 12.0);
    assert_eq!(count(&judged_multi(&grants, &[multi], &[]), Rule::PartialMultiKey), 1);
    // Seen with one key gone while the grant was live.
    let (grants, mut multi) = all_of("a", &["k1", "k2"], &[Some(1), Some(1)], 10.0, 12.0);
    multi.checks.push((10.5, vec![true, false]));
    let out = judged_multi(&grants, std::slice::from_ref(&multi), &[]);
    assert_eq!(count(&out, Rule::PartialMultiKey), 1, "{:?}", out.violations);
    // Every key gone while live: a lost grant.
    multi.checks[0].1 = vec![false, false];
    assert_eq!(count(&judged_multi(&grants, &[multi], &[]), Rule::PrematureLoss), 1);
    // A refused request that left a key held.
    let refused = NotGranted {
        worker: "b".into(),
        owner: "b".into(),
        keys: vec!["k1".into(), "k3".into()],
        left_held: vec!["k3".into()],
        at: 10.0,
    };
    assert_eq!(count(&judged_multi(&[], &[], &[refused]), Rule::PartialMultiKey), 1);
}

#[test]
fn keys_gone_after_expiry_or_release_are_no_partial_grant() {
    let (grants, mut multi) = all_of("a", &["k1", "k2"], &[Some(1), Some(1)], 10.0, 12.0);
    // Paused past its expiry: the check after waking finds keys gone.
    multi.checks.push((12.5, vec![true, false]));
    // A clean refusal.
    let refused = NotGranted {
        worker: "b".into(),
        owner: "b".into(),
        keys: vec!["k1".into()],
        left_held: vec![],
        at: 10.0,
    };
    let out = judged_multi(&grants, &[multi], &[refused]);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.multi_not_granted, 1);
}

#[test]
fn a_lease_found_gone_while_live_is_found() {
    let mut lost = shared("a", 1, 10.0, 12.0, Some(3));
    lost.checks.push((11.0, false));
    assert_eq!(count(&found(&[lost.clone()]), Rule::PrematureLoss), 1);
    // After its release began, or past its expiry, it is no loss.
    lost.releasing_lb = Some(10.9);
    lost.checks.push((12.5, false));
    assert!(found(&[lost]).violations.is_empty());
}

#[test]
fn histories_of_the_primitives_read_back() {
    let worker = r#"{"ev":"grant_all","owner":"m:1","keys":["k2","k1"],"fences":[4,9],"requested_at":9.9,"granted_by":10.0,"live_until":11.0}
{"ev":"expiry","owner":"m:1","key":"k2","fence":4,"live_until":11.05}
{"ev":"check","owner":"m:1","keys":["k2","k1"],"fences":[4,9],"held":[true,true],"at":10.01}
{"ev":"releasing","owner":"m:1","key":"k2","fence":4,"local":5.0,"lb":10.5}
{"ev":"releasing","owner":"m:1","key":"k1","fence":9,"local":5.0,"lb":10.5}
{"ev":"grant","owner":"s:2","key":"s","fence":3,"requested_at":9.0,"granted_by":9.1,"live_until":10.0,"mode":"shared","max_holders":3}
{"ev":"leader","election":"e","term":null,"info":null,"expires_at":null,"lb":9.0,"ub":9.01}
{"ev":"not_granted","owner":"m:2","keys":["k1","k3"],"left_held":[],"at":12.0}
{"ev":"grant","owner":"r","key":"hot/0","fence":1,"requested_at":null,"granted_by":1.0,"live_until":2.0"#;
    let history = parse(&[("m0", worker)]);
    assert_eq!(history.grants.len(), 3, "the last line is cut short: skipped");
    let k2 = history.grants.iter().find(|g| g.key == "k2").unwrap();
    assert!(k2.multi && k2.fence == 4 && k2.live_until == 11.05);
    // Set out to release (no answer recorded, e.g. killed): held until it was last seen.
    assert_eq!(k2.held_until(), 10.5);
    let s = history.grants.iter().find(|g| g.key == "s").unwrap();
    assert_eq!((s.mode, s.max_holders, s.primitive()), (Mode::Shared, Some(3), Primitive::Semaphore));
    assert_eq!(history.multi.len(), 1);
    assert_eq!(history.multi[0].checks, vec![(10.01, vec![true, true])]);
    assert_eq!((history.observations.len(), history.not_granted.len()), (1, 1));
}

fn answer(key: &str, free: bool, lb: f64, ub: f64) -> crate::history::FreeAnswer {
    crate::history::FreeAnswer { worker: "w".into(), key: key.into(), free, lb, ub }
}

#[test]
fn a_wait_free_answer_of_free_while_one_lease_held_the_key_throughout_is_found() {
    let mut a = released(lease("a", "k", 1, 10.0, 20.0, Mode::Exclusive), 15.0);
    // a's worker checked its lease at 10.5: committed by then.
    a.checks.push((10.5, true));
    let grants = [a];
    let answers = [
        // Asked and answered while a surely held the key, committed: never free in between.
        answer("k", true, 11.0, 12.0),
        // After the grant's answer but before a later statement of its worker: the grant may
        // not have committed yet, and the key was free until it did.
        answer("k", true, 10.1, 10.2),
        // Answered after a's release began: free then.
        answer("k", true, 14.0, 15.1),
        // Asked before a's grant: the key may have been free before it.
        answer("k", true, 9.9, 10.5),
        // Still held: nothing claimed.
        answer("k", false, 11.0, 13.0),
        // Another key.
        answer("other", true, 11.0, 12.0),
    ];
    let mut out = found(&grants);
    free_answers(&grants, &answers, &mut out);
    assert_eq!(out.by_rule.get(&Rule::FreeWhileHeld), Some(&1), "{:?}", out.violations);
    assert!(out.violations[0].contains("asked at 11.000000"), "{:?}", out.violations);
    assert_eq!(out.free_answers, (5, 6));
}

#[test]
fn a_reader_holding_the_key_makes_a_free_answer_wrong_too() {
    let mut r = shared("r", 1, 10.0, 20.0, None);
    r.writes.push((11.0, true));
    let grants = [r];
    let mut out = found(&grants);
    free_answers(&grants, &[answer("s", true, 12.0, 13.0)], &mut out);
    assert_eq!(out.by_rule.get(&Rule::FreeWhileHeld), Some(&1));
}

#[test]
fn a_free_answer_beside_a_grant_never_seen_committed_is_not_judged() {
    // The grant's worker recorded nothing after it (killed, say): when it committed is unknown.
    let grants = [lease("a", "k", 1, 10.0, 20.0, Mode::Shared)];
    let mut out = found(&grants);
    free_answers(&grants, &[answer("k", true, 10.00004, 10.0002), answer("k", true, 15.0, 15.1)], &mut out);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
}
