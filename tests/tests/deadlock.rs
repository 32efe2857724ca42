//! Deadlocks between session-bound leases are detected, not waited out forever: the head of a
//! queue waits for a session-bound holder in PostgreSQL's lock manager, whose deadlock detector
//! sees the cycle and ends one side with ERROR 40P01 (after `deadlock_timeout`).

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, expect_sqlstate, finish, key, owner, wait_for_waiters};
use futures::future::{Either, select};
use tokio_postgres::error::SqlState;

#[tokio::test]
async fn waiting_for_each_others_session_bound_leases_ends_one_side_with_40p01() {
    const T: &str = "waiting_for_each_others_session_bound_leases_ends_one_side_with_40p01";
    let cluster = Cluster::shared();
    let (a, b, observer) = (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let (k1, k2) = (key(T, "k1"), key(T, "k2"));
    let (oa, ob) = (owner(T, "a"), owner(T, "b"));
    a.acquire(&k1, &oa, None, Some("0")).await.unwrap().expect("a takes k1");
    b.acquire(&k2, &ob, None, Some("0")).await.unwrap().expect("b takes k2");

    let started = Instant::now();
    let a_waits = a.spawn_acquire(&k2, &oa, None, None);
    wait_for_waiters(&observer, &k2, 1).await;
    let b_waits = b.spawn_acquire(&k1, &ob, None, None);

    // Exactly one side is chosen as the victim; the other keeps waiting until the victim's
    // session gives its lease up.
    let (victim, survivor, survivor_key) = match select(a_waits, b_waits).await {
        Either::Left((attempt, b_waits)) => (attempt.unwrap(), b_waits, k1.clone()),
        Either::Right((attempt, a_waits)) => (attempt.unwrap(), a_waits, k2.clone()),
    };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the cycle was broken after {:?}",
        started.elapsed()
    );
    expect_sqlstate(victim.result, &SqlState::T_R_DEADLOCK_DETECTED, "the victim of the cycle");
    assert!(!survivor.is_finished(), "the other side still waits: only one victim");

    // The victim's application reacts as it should: it gives up what it holds.
    let victim_session = victim.session;
    let victim_owner = if survivor_key == k1 { &oa } else { &ob };
    assert_eq!(victim_session.release_all(victim_owner).await.unwrap(), 1);
    let granted = finish(survivor, Duration::from_secs(5), "the survivor").await;
    assert!(granted.result.unwrap().is_some(), "the survivor is granted once the cycle is broken");
}

#[tokio::test]
async fn an_unbounded_wait_for_a_lease_of_the_same_session_is_a_deadlock() {
    const T: &str = "an_unbounded_wait_for_a_lease_of_the_same_session_is_a_deadlock";
    let cluster = Cluster::shared();
    let s = cluster.connect().await;
    let k = key(T, "k");
    let fence = s.acquire(&k, &owner(T, "first"), None, Some("0")).await.unwrap().unwrap();

    let started = Instant::now();
    let result = s.acquire(&k, &owner(T, "second"), Some("10s"), None).await;
    expect_sqlstate(result, &SqlState::T_R_DEADLOCK_DETECTED, "waiting for this session's own lease");
    assert!(started.elapsed() < Duration::from_secs(2), "reported at once, not after a timeout");

    // A bounded wait simply times out, and the lease is untouched either way.
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    assert_eq!(s.acquire(&k, &owner(T, "second"), Some("10s"), Some("300ms")).await.unwrap(), None);
    assert!(started.elapsed() >= wait);
    assert!(s.holds(&k, fence).await.unwrap());
}
