//! Deadlocks between session-bound leases are detected, not waited out forever: the head of a
//! queue waits for a session-bound holder in PostgreSQL's lock manager, whose deadlock detector
//! sees the cycle and ends one side with ERROR 40P01 (after `deadlock_timeout`).

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, eventually, expect_sqlstate, finish, key, owner, wait_for_waiters, within};
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

/// Two heads that each keep their queue until their transaction ends and then wait in the other's
/// queue: a cycle of queue waits only, which the deadlock check still ends (the waiters hold a
/// queue lock, so their waits are checked).
#[tokio::test]
async fn heads_waiting_in_each_others_queues_end_one_side_with_40p01() {
    const T: &str = "heads_waiting_in_each_others_queues_end_one_side_with_40p01";
    let cluster = Cluster::shared();
    let (a, b, x, observer) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let (k1, k2) = (key(T, "k1"), key(T, "k2"));
    let (oa, ob, ox) = (owner(T, "a"), owner(T, "b"), owner(T, "x"));
    // Each of a and b is granted its key through the queue (it waited for x's short lease), so it
    // stays at the queue's head until its transaction ends.
    x.acquire(&k1, &ox, Some("600ms"), Some("0")).await.unwrap().expect("x takes k1");
    x.acquire(&k2, &ox, Some("600ms"), Some("0")).await.unwrap().expect("x takes k2");
    a.client().batch_execute("BEGIN").await.unwrap();
    b.client().batch_execute("BEGIN").await.unwrap();
    let (a_first, b_first) =
        (a.spawn_acquire(&k1, &oa, Some("1h"), None), b.spawn_acquire(&k2, &ob, Some("1h"), None));
    let a = finish(a_first, Duration::from_secs(5), "a waits out x's lease of k1").await;
    let b = finish(b_first, Duration::from_secs(5), "b waits out x's lease of k2").await;
    assert!(a.result.unwrap().is_some() && b.result.unwrap().is_some(), "both granted after waiting");

    let started = Instant::now();
    let a_pid = a.session.pid();
    let a_waits = a.session.spawn_acquire(&k2, &oa, Some("1h"), None);
    eventually(Duration::from_secs(5), "a waits in k2's queue", || async {
        let waiting: Option<String> = observer
            .client()
            .query_one("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", &[&a_pid])
            .await
            .unwrap()
            .get(0);
        waiting.as_deref() == Some("Lock")
    })
    .await;
    let b_waits = b.session.spawn_acquire(&k1, &ob, Some("1h"), None);
    let (victim, survivor) =
        match within(Duration::from_secs(15), "one side's 40P01", select(a_waits, b_waits)).await {
            Either::Left((attempt, other)) | Either::Right((attempt, other)) => (attempt.unwrap(), other),
        };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the cycle was broken after {:?}",
        started.elapsed()
    );
    expect_sqlstate(victim.result, &SqlState::T_R_DEADLOCK_DETECTED, "the victim of the cycle");
    // The victim's transaction ends: its queue goes, and its lease with the rollback.
    victim.session.client().batch_execute("ROLLBACK").await.unwrap();
    let granted = finish(survivor, Duration::from_secs(5), "the survivor").await;
    assert!(granted.result.unwrap().is_some(), "the survivor is granted once the cycle is broken");
    granted.session.client().batch_execute("ROLLBACK").await.unwrap();
}

/// A waiter in line that holds no queue lock waits with the deadlock check off; a cycle through
/// it (it holds a row the head then wants) is still found, by the head's own wait, at once.
#[tokio::test]
async fn a_cycle_through_a_waiter_in_line_is_found_by_the_head() {
    const T: &str = "a_cycle_through_a_waiter_in_line_is_found_by_the_head";
    let cluster = Cluster::shared();
    let (head, line, x, observer) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let table = format!("rows_{}", std::process::id());
    observer
        .client()
        .batch_execute(&format!("CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY); INSERT INTO {table} VALUES (1) ON CONFLICT DO NOTHING"))
        .await
        .unwrap();
    let k = key(T, "k");
    let (oh, ol, ox) = (owner(T, "head"), owner(T, "line"), owner(T, "x"));
    x.acquire(&k, &ox, Some("1500ms"), Some("0")).await.unwrap().expect("x takes k");
    head.client().batch_execute("BEGIN").await.unwrap();
    let head_waits = head.spawn_acquire(&k, &oh, Some("1h"), None);
    wait_for_waiters(&observer, &k, 1).await;
    // In line behind the head, holding a row.
    line.client().batch_execute(&format!("BEGIN; UPDATE {table} SET id = 1 WHERE id = 1")).await.unwrap();
    let line_waits = line.spawn_acquire(&k, &ol, Some("1h"), None);
    wait_for_waiters(&observer, &k, 2).await;
    // x's lease runs out: the head is granted and keeps the queue until it commits; then it
    // wants the row the waiter in line holds.
    let head = finish(head_waits, Duration::from_secs(5), "the head").await;
    assert!(head.result.unwrap().is_some(), "the head is granted when x's lease runs out");
    let started = Instant::now();
    let update =
        head.session.client().batch_execute(&format!("UPDATE {table} SET id = 1 WHERE id = 1")).await;
    expect_sqlstate(update, &SqlState::T_R_DEADLOCK_DETECTED, "the head's wait for the row");
    assert!(started.elapsed() < Duration::from_secs(10), "found after {:?}", started.elapsed());
    head.session.client().batch_execute("ROLLBACK").await.unwrap();
    let line = finish(line_waits, Duration::from_secs(5), "the waiter in line").await;
    assert!(line.result.unwrap().is_some(), "the waiter in line is granted once the head is gone");
    line.session.client().batch_execute(&format!("ROLLBACK; DROP TABLE IF EXISTS {table}")).await.unwrap();
}
