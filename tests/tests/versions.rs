//! What differs between the PostgreSQL versions dlock runs on (15 and 18), seen from SQL:
//! newer servers name dlock's waits in `pg_stat_activity`, and accept infinite intervals.

use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, eventually, expect_sqlstate, finish, key, owner};

async fn server_major(s: &Session) -> u32 {
    let num: String = s.query_one("SHOW server_version_num", &[]).await.unwrap().get(0);
    num.parse::<u32>().unwrap() / 10_000
}

/// (wait_event_type, wait_event) of backend `pid`.
async fn wait_event(observer: &Session, pid: i32) -> (Option<String>, Option<String>) {
    let row = observer
        .query_one("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn a_waiting_head_shows_a_named_wait_event_from_postgresql_17_on() {
    const T: &str = "a_waiting_head_shows_a_named_wait_event";
    let cluster = Cluster::shared();
    let (holder, waiter, observer) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let (k, a, b) = (key(T, "k"), owner(T, "a"), owner(T, "b"));
    holder.try_acquire(&k, &a, "30s").await.unwrap().expect("granted");
    let pid = waiter.pid();
    let attempt = waiter.spawn_acquire(&k, &b, Some("30s"), Some("20s"));
    let expected = if server_major(&observer).await >= 17 {
        (Some("Extension".to_string()), Some("DlockLease".to_string()))
    } else {
        (Some("Extension".to_string()), Some("Extension".to_string()))
    };
    eventually(Duration::from_secs(5), "the head waits on the lease", || async {
        wait_event(&observer, pid).await == expected
    })
    .await;
    assert!(holder.release(&k, &a).await.unwrap());
    let attempt = finish(attempt, Duration::from_secs(10), "the head").await;
    assert!(attempt.result.unwrap().is_some());
}

#[tokio::test]
async fn a_fast_waiter_shows_a_named_wait_event_from_postgresql_17_on() {
    let cluster = Cluster::shared_named(
        "versions-fast",
        &["shared_preload_libraries = 'dlock'", "dlock.fast_max_ttl = 1"],
    );
    let (holder, waiter, observer) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let acquire = "SELECT dlock_fast_acquire($1, $2, '1 second', wait => '10 seconds')";
    let fence: Option<i64> = holder.query_one(acquire, &[&"k", &"a"]).await.unwrap().get(0);
    assert!(fence.is_some(), "granted once the lock-delay is over");
    let pid = waiter.pid();
    let waiting = tokio::spawn(async move {
        let fence: Option<i64> = waiter.query_one(acquire, &[&"k", &"b"]).await.unwrap().get(0);
        fence
    });
    let expected = if server_major(&observer).await >= 17 { "DlockFast" } else { "Extension" };
    eventually(Duration::from_secs(5), "the fast waiter sleeps", || async {
        wait_event(&observer, pid).await.1.as_deref() == Some(expected)
    })
    .await;
    let granted = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
    assert!(granted.is_some(), "granted when the holder's lease ran out");
}

#[tokio::test]
async fn an_infinite_wait_waits_without_limit_where_the_server_has_infinite_intervals() {
    const T: &str = "an_infinite_wait";
    let cluster = Cluster::shared();
    let (holder, waiter) = (cluster.connect().await, cluster.connect().await);
    let (k, a, b) = (key(T, "k"), owner(T, "a"), owner(T, "b"));
    holder.try_acquire(&k, &a, "30s").await.unwrap().expect("granted");
    if server_major(&holder).await < 17 {
        expect_sqlstate(
            waiter.acquire(&k, &b, Some("30s"), Some("infinity")).await,
            &SqlState::INVALID_DATETIME_FORMAT,
            "PostgreSQL 15 has no infinite interval",
        );
        return;
    }
    let attempt = waiter.spawn_acquire(&k, &b, Some("30s"), Some("infinity"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!attempt.is_finished(), "still waiting");
    assert!(holder.release(&k, &a).await.unwrap());
    let attempt = finish(attempt, Duration::from_secs(10), "the infinite wait").await;
    assert!(attempt.result.unwrap().is_some(), "granted");
}
