//! Fast mode's wait queues: waiters of a fast key line up in shared memory and are served in
//! arrival order; a release hands the key to the first in line in place (before that waiter
//! even wakes); a try never passes anyone in line; a wait that ends (timeout, cancel, a client
//! that hangs up) leaves its line and is never handed the key; a waiter whose role is at its
//! share when its turn comes is told so and the next one is served.

use std::time::Duration;

use dlock_tests::{Cluster, NoTls, Session, SqlState, eventually, expect_sqlstate, key, owner, within};
use tokio::task::JoinHandle;

const PRELOAD: &str = "shared_preload_libraries = 'dlock'";

fn cluster() -> &'static Cluster {
    Cluster::shared_named("fast-queue", &[PRELOAD, "dlock.fast_max_ttl = 2"])
}

async fn acquire(
    s: &Session,
    key: &str,
    owner: &str,
    ttl: &str,
    wait: Option<&str>,
) -> Result<Option<i64>, tokio_postgres::Error> {
    s.query_one(
        "SELECT dlock_fast_acquire($1, $2, $3::text::interval, $4::text::interval)",
        &[&key, &owner, &ttl, &wait],
    )
    .await
    .map(|r| r.get(0))
}

async fn release(s: &Session, key: &str, owner: &str) -> bool {
    s.query_one("SELECT dlock_fast_release($1, $2)", &[&key, &owner]).await.unwrap().get(0)
}

/// The owner of the live fast lease on `key`, if any.
async fn holder(s: &Session, key: &str) -> Option<String> {
    s.query_opt("SELECT owner FROM dlock_fast_locks() WHERE key = $1", &[&key])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// Waits out the lock-delay after the cluster's start.
async fn past_lock_delay(cluster: &Cluster) -> Session {
    let s = cluster.connect().await;
    let (k, o) = (key("fast_queue", "probe"), owner("fast_queue", "probe"));
    eventually(Duration::from_secs(20), "the lock-delay after start ends", || async {
        acquire(&s, &k, &o, "1s", Some("0")).await.unwrap().is_some()
    })
    .await;
    assert!(release(&s, &k, &o).await);
    s
}

/// Until the backend `pid` sleeps in a dlock wait.
async fn asleep(observer: &Session, pid: i32) {
    eventually(Duration::from_secs(10), &format!("backend {pid} waits"), || async {
        let state: Option<String> = observer
            .query_opt("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        state.as_deref() == Some("Extension")
    })
    .await;
}

/// A waiter on `key` as `owner` in a task of its own (its fence or error); its backend pid.
async fn waiter(
    cluster: &Cluster,
    key: &str,
    owner: &str,
    wait: Option<&str>,
) -> (i32, JoinHandle<(Result<Option<i64>, tokio_postgres::Error>, Session)>) {
    let s = cluster.connect().await;
    let pid = s.pid();
    let (key, owner, wait) = (key.to_string(), owner.to_string(), wait.map(str::to_string));
    (pid, tokio::spawn(async move { (acquire(&s, &key, &owner, "2s", wait.as_deref()).await, s) }))
}

#[tokio::test]
async fn waiters_are_served_in_arrival_order_and_handed_the_key_in_place() {
    const T: &str = "arrival_order";
    let cluster = cluster();
    let observer = past_lock_delay(cluster).await;
    let k = key(T, "k");
    let first = acquire(&observer, &k, &owner(T, "holder"), "2s", Some("0")).await.unwrap().expect("granted");
    let mut line = Vec::new();
    for i in 0..6 {
        let (pid, task) = waiter(cluster, &k, &owner(T, &format!("w{i}")), Some("30s")).await;
        asleep(&observer, pid).await;
        line.push(task);
    }
    // A try does not pass the line, nor does another owner's wait of 0.
    assert_eq!(acquire(&observer, &k, &owner(T, "barger"), "2s", Some("0")).await.unwrap(), None);

    let mut previous = (owner(T, "holder"), first);
    for (i, task) in line.into_iter().enumerate() {
        assert!(release(&observer, &k, &previous.0).await, "{} releases", previous.0);
        // Handed over in the release itself: the next in line holds it before it wakes.
        let expected = owner(T, &format!("w{i}"));
        assert_eq!(holder(&observer, &k).await.as_deref(), Some(expected.as_str()), "handed to w{i}");
        let (result, _session) = within(Duration::from_secs(10), &format!("w{i}"), task).await.unwrap();
        let fence = result.unwrap().expect("granted");
        assert!(fence > previous.1, "fences grow along the line");
        previous = (expected, fence);
    }
    assert!(release(&observer, &k, &previous.0).await);
    assert_eq!(holder(&observer, &k).await, None, "the last release frees the key");
}

#[tokio::test]
async fn waits_that_end_leave_the_line_and_are_never_handed_the_key() {
    const T: &str = "ended_waits";
    let cluster = cluster();
    let observer = past_lock_delay(cluster).await;
    let k = key(T, "k");
    acquire(&observer, &k, &owner(T, "holder"), "2s", Some("0")).await.unwrap().expect("granted");

    // In line: a cancelled one, one that times out, one whose client hangs up, then two more.
    let (cancelled_pid, cancelled) = waiter(cluster, &k, &owner(T, "cancelled"), None).await;
    asleep(&observer, cancelled_pid).await;
    let timeout = cluster.connect().await;
    timeout.batch_execute("SET statement_timeout = '300ms'").await.unwrap();
    let timeout_pid = timeout.pid();
    let k1 = k.clone();
    let timed_out = tokio::spawn(async move { acquire(&timeout, &k1, "timed-out", "2s", None).await });
    asleep(&observer, timeout_pid).await;
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(cluster.port()).user("postgres").dbname("postgres");
    let (client, connection) = config.connect(NoTls).await.expect("connect");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let gone_pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let (k2, gone_owner) = (k.clone(), owner(T, "hung-up"));
    tokio::spawn(async move {
        let _ = client.query_one("SELECT dlock_fast_acquire($1, $2, '2s', NULL)", &[&k2, &gone_owner]).await;
    });
    asleep(&observer, gone_pid).await;
    let (next_pid, next) = waiter(cluster, &k, &owner(T, "next"), Some("30s")).await;
    asleep(&observer, next_pid).await;

    let token: i32 = cancelled_pid;
    let cancel: bool = observer.query_one("SELECT pg_cancel_backend($1)", &[&token]).await.unwrap().get(0);
    assert!(cancel);
    let (result, _) = within(Duration::from_secs(10), "cancelled", cancelled).await.unwrap();
    expect_sqlstate(result, &SqlState::QUERY_CANCELED, "a cancelled fast wait");
    let result = within(Duration::from_secs(10), "timed out", timed_out).await.unwrap();
    expect_sqlstate(result, &SqlState::QUERY_CANCELED, "a fast wait past statement_timeout");
    driver.abort(); // the client's socket closes mid-wait
    eventually(Duration::from_secs(10), "the hung-up waiter's backend ends", || async {
        let alive: bool = observer
            .query_one("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", &[&gone_pid])
            .await
            .unwrap()
            .get(0);
        !alive
    })
    .await;

    // The release goes past all three, to the one still waiting.
    assert!(release(&observer, &k, &owner(T, "holder")).await);
    assert_eq!(holder(&observer, &k).await, Some(owner(T, "next")));
    let (result, _) = within(Duration::from_secs(10), "next", next).await.unwrap();
    assert!(result.unwrap().is_some());
    assert!(release(&observer, &k, &owner(T, "next")).await);
    assert_eq!(holder(&observer, &k).await, None);
}

#[tokio::test]
async fn the_first_in_line_takes_over_an_expired_lease_and_a_bounded_wait_gives_up() {
    const T: &str = "expiry";
    let cluster = cluster();
    let observer = past_lock_delay(cluster).await;
    let k = key(T, "k");
    acquire(&observer, &k, &owner(T, "holder"), "1s", Some("0")).await.unwrap().expect("granted");
    let (short_pid, short) = waiter(cluster, &k, &owner(T, "short"), Some("200ms")).await;
    asleep(&observer, short_pid).await;
    let (first_pid, first) = waiter(cluster, &k, &owner(T, "first"), Some("30s")).await;
    asleep(&observer, first_pid).await;
    let (second_pid, second) = waiter(cluster, &k, &owner(T, "second"), Some("30s")).await;
    asleep(&observer, second_pid).await;
    // The first in line gives up after 200 ms: the next becomes first.
    let (result, _) = within(Duration::from_secs(10), "short", short).await.unwrap();
    assert_eq!(result.unwrap(), None, "a bounded wait ends with NULL");
    // The holder never releases: at its expiry the first in line takes the key over, then
    // releases it to the second.
    let (result, first_session) = within(Duration::from_secs(10), "first", first).await.unwrap();
    assert!(result.unwrap().is_some());
    assert!(!second.is_finished(), "the second waits for the first");
    assert!(release(&first_session, &k, &owner(T, "first")).await);
    let (result, second_session) = within(Duration::from_secs(10), "second", second).await.unwrap();
    assert!(result.unwrap().is_some());
    assert!(release(&second_session, &k, &owner(T, "second")).await);
}

#[tokio::test]
async fn a_waiter_at_its_share_when_its_turn_comes_is_refused_and_the_next_served() {
    const T: &str = "share_at_turn";
    let cluster = Cluster::shared_named(
        "fast-queue-shares",
        &[PRELOAD, "dlock.fast_max_ttl = 2", "dlock.fast_max_leases_per_role = 2"],
    );
    let observer = past_lock_delay(cluster).await;
    observer.batch_execute("CREATE ROLE fast_queue_tenant LOGIN").await.unwrap();
    let k = key(T, "k");
    acquire(&observer, &k, &owner(T, "holder"), "2s", Some("0")).await.unwrap().expect("granted");
    // The tenant holds one key and waits for k: within its share of 2 while it waits.
    let tenant = cluster.connect_as("fast_queue_tenant").await;
    acquire(&tenant, &key(T, "own-1"), "t", "2s", Some("0")).await.unwrap().expect("granted");
    let tenant_pid = tenant.pid();
    let k1 = k.clone();
    let waiting = tokio::spawn(async move { acquire(&tenant, &k1, "t", "2s", Some("30s")).await });
    asleep(&observer, tenant_pid).await;
    let (next_pid, next) = waiter(cluster, &k, &owner(T, "next"), Some("30s")).await;
    asleep(&observer, next_pid).await;
    // Now its share fills up (a second session of the same role), and then k is released.
    let tenant2 = cluster.connect_as("fast_queue_tenant").await;
    acquire(&tenant2, &key(T, "own-2"), "t2", "2s", Some("0")).await.unwrap().expect("granted");
    assert!(release(&observer, &k, &owner(T, "holder")).await);
    let result = within(Duration::from_secs(10), "tenant", waiting).await.unwrap();
    expect_sqlstate(result, &SqlState::CONFIGURATION_LIMIT_EXCEEDED, "its share, at its turn");
    let (result, _) = within(Duration::from_secs(10), "next", next).await.unwrap();
    assert!(result.unwrap().is_some(), "the next in line is served");
    assert_eq!(holder(&observer, &k).await, Some(owner(T, "next")));
}
