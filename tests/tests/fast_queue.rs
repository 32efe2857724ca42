//! Fast mode's wait queues: waiters of a fast key line up in shared memory and are served in
//! arrival order; a release hands the key to the first in line in place (before that waiter
//! even wakes); a try never passes anyone in line; a wait that ends (timeout, cancel, a client
//! that hangs up) leaves its line and is never handed the key, at once, even when a savepoint
//! keeps its transaction going, and at whatever moment it ends while other sessions come and go;
//! a waiter whose role is at its share when its turn comes is told so and the next one is served.

use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, eventually, expect_sqlstate, key, owner, within};
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

/// Renews `owner`'s lease on `key` for 2 s; whether it held it.
async fn renew(s: &Session, key: &str, owner: &str) -> bool {
    let expiry: Option<tokio_postgres::types::Timestamp<std::time::SystemTime>> =
        s.query_one("SELECT dlock_fast_renew($1, $2, '2s')", &[&key, &owner]).await.unwrap().get(0);
    expiry.is_some()
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

/// What the backend `pid` waits for: its wait event's type and name (none once it is gone).
async fn wait_event(observer: &Session, pid: i32) -> (Option<String>, Option<String>) {
    let sql = "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $1";
    observer.query_opt(sql, &[&pid]).await.unwrap().map_or((None, None), |r| (r.get(0), r.get(1)))
}

/// Until the backend `pid` sleeps in a dlock wait.
async fn asleep(observer: &Session, pid: i32) {
    eventually(Duration::from_secs(10), &format!("backend {pid} waits"), || async {
        wait_event(observer, pid).await.0.as_deref() == Some("Extension")
    })
    .await;
}

/// Until the backend `pid` is gone (its client hung up).
async fn ended(observer: &Session, pid: i32) {
    eventually(Duration::from_secs(10), &format!("backend {pid} ends"), || async {
        let sql = "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)";
        observer.query_one(sql, &[&pid]).await.unwrap().get::<_, bool>(0)
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
    let (client, gone_pid, driver) = cluster.connect_client().await;
    let (k2, gone_owner) = (k.clone(), owner(T, "hung-up"));
    tokio::spawn(async move {
        let _ = client.query_one("SELECT dlock_fast_acquire($1, $2, '2s', NULL)", &[&k2, &gone_owner]).await;
    });
    asleep(&observer, gone_pid).await;
    let (next_pid, next) = waiter(cluster, &k, &owner(T, "next"), Some("30s")).await;
    asleep(&observer, next_pid).await;

    assert!(renew(&observer, &k, &owner(T, "holder")).await, "the holder's lease outlasts the test's steps");
    cancel(&observer, cancelled_pid).await;
    let (result, _) = within(Duration::from_secs(10), "cancelled", cancelled).await.unwrap();
    expect_sqlstate(result, &SqlState::QUERY_CANCELED, "a cancelled fast wait");
    let result = within(Duration::from_secs(10), "timed out", timed_out).await.unwrap();
    expect_sqlstate(result, &SqlState::QUERY_CANCELED, "a fast wait past statement_timeout");
    driver.abort(); // the client's socket closes mid-wait
    ended(&observer, gone_pid).await;

    // The release goes past all three, to the one still waiting.
    assert!(release(&observer, &k, &owner(T, "holder")).await);
    assert_eq!(holder(&observer, &k).await, Some(owner(T, "next")));
    let (result, _) = within(Duration::from_secs(10), "next", next).await.unwrap();
    assert!(result.unwrap().is_some());
    assert!(release(&observer, &k, &owner(T, "next")).await);
    assert_eq!(holder(&observer, &k).await, None);
}

/// Cancels the backend `pid`'s statement.
async fn cancel(observer: &Session, pid: i32) {
    let sent: bool = observer.query_one("SELECT pg_cancel_backend($1)", &[&pid]).await.unwrap().get(0);
    assert!(sent, "backend {pid} is there to cancel");
}

/// With the waiter of backend `caught` asleep in line for `k`, lines up `T:next` behind it,
/// renews the holder's lease (so it outlasts the test's steps), and cancels `caught`'s wait:
/// the task of `next`.
async fn cancel_ahead_of_next(
    cluster: &Cluster,
    observer: &Session,
    k: &str,
    test: &str,
    caught: i32,
) -> JoinHandle<(Result<Option<i64>, tokio_postgres::Error>, Session)> {
    asleep(observer, caught).await;
    let (next_pid, next) = waiter(cluster, k, &owner(test, "next"), Some("30s")).await;
    asleep(observer, next_pid).await;
    assert!(renew(observer, k, &owner(test, "holder")).await, "the holder still holds it");
    cancel(observer, caught).await;
    next
}

/// The holder's release goes past the cancelled waiter to `next`, which gives the key back.
async fn passes_over_to_next(
    observer: &Session,
    k: &str,
    test: &str,
    next: JoinHandle<(Result<Option<i64>, tokio_postgres::Error>, Session)>,
) {
    assert!(release(observer, k, &owner(test, "holder")).await);
    assert_eq!(holder(observer, k).await, Some(owner(test, "next")));
    let (result, _) = within(Duration::from_secs(10), "next", next).await.unwrap();
    assert!(result.unwrap().is_some());
    assert!(release(observer, k, &owner(test, "next")).await);
}

#[tokio::test]
async fn a_wait_that_fails_in_a_savepoint_leaves_the_line_before_the_transaction_ends() {
    const T: &str = "savepoint";
    let cluster = cluster();
    let observer = past_lock_delay(cluster).await;
    let (k, other) = (key(T, "k"), key(T, "other"));
    acquire(&observer, &k, &owner(T, "holder"), "2s", Some("0")).await.unwrap().expect("granted");
    // The waiter's transaction goes on after its wait failed: a savepoint caught the error, so
    // the transaction does not end with it.
    let caught = cluster.connect().await;
    caught.batch_execute("BEGIN; SAVEPOINT before_wait").await.unwrap();
    let caught_pid = caught.pid();
    let (k1, caught_owner) = (k.clone(), owner(T, "caught"));
    let waiting = tokio::spawn(async move {
        let result = acquire(&caught, &k1, &caught_owner, "2s", Some("30s")).await;
        (result, caught)
    });
    let next = cancel_ahead_of_next(cluster, &observer, &k, T, caught_pid).await;
    let (result, caught) = within(Duration::from_secs(10), "cancelled", waiting).await.unwrap();
    expect_sqlstate(result, &SqlState::QUERY_CANCELED, "a cancelled fast wait in a savepoint");
    caught.batch_execute("ROLLBACK TO SAVEPOINT before_wait").await.unwrap();

    // Its transaction is still open, and the release goes past it.
    passes_over_to_next(&observer, &k, T, next).await;
    // Its next call starts afresh: a free key is granted to it, as itself, with that key's fence.
    let fence =
        acquire(&caught, &other, &owner(T, "caught"), "2s", Some("0")).await.unwrap().expect("granted");
    assert_eq!(holder(&observer, &other).await, Some(owner(T, "caught")));
    let holds: bool =
        observer.query_one("SELECT dlock_fast_holds($1, $2)", &[&other, &fence]).await.unwrap().get(0);
    assert!(holds, "the fence is the new key's");
    let rival = acquire(&observer, &other, &owner(T, "rival"), "2s", Some("0")).await.unwrap();
    assert_eq!(rival, None, "one holder at a time");
    caught.batch_execute("COMMIT").await.unwrap();
    assert!(release(&observer, &other, &owner(T, "caught")).await);
}

#[tokio::test]
async fn a_wait_caught_by_an_exception_block_leaves_the_line_while_the_block_goes_on() {
    const T: &str = "exception_block";
    let cluster = cluster();
    let observer = past_lock_delay(cluster).await;
    let k = key(T, "k");
    acquire(&observer, &k, &owner(T, "holder"), "2s", Some("0")).await.unwrap().expect("granted");
    // A function that waits, catches the cancel, and sleeps on in the same transaction.
    let caught = cluster.connect().await;
    caught
        .batch_execute(
            "CREATE FUNCTION pg_temp.wait_then_sleep(k text, o text) RETURNS text LANGUAGE plpgsql AS $$
             BEGIN
               BEGIN
                 PERFORM dlock_fast_acquire(k, o, '2s', '30s');
               EXCEPTION WHEN query_canceled THEN
                 PERFORM pg_sleep(30);
                 RETURN 'caught';
               END;
               RETURN 'granted';
             END $$",
        )
        .await
        .unwrap();
    let caught_pid = caught.pid();
    let (k1, caught_owner) = (k.clone(), owner(T, "caught"));
    let running = tokio::spawn(async move {
        let sql = "SELECT pg_temp.wait_then_sleep($1, $2)";
        caught.query_one(sql, &[&k1, &caught_owner]).await.map(|r| r.get::<_, String>(0))
    });
    let next = cancel_ahead_of_next(cluster, &observer, &k, T, caught_pid).await;
    eventually(Duration::from_secs(10), "the exception block sleeps on", || async {
        wait_event(&observer, caught_pid).await.1.as_deref() == Some("PgSleep")
    })
    .await;
    // Its transaction is still running, and the release goes past it.
    passes_over_to_next(&observer, &k, T, next).await;
    cancel(&observer, caught_pid).await;
    let result = within(Duration::from_secs(10), "the sleep", running).await.unwrap();
    expect_sqlstate(result, &SqlState::QUERY_CANCELED, "the sleep, cancelled in turn");
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

/// How a waiter of the churn test ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// Cancelled (pg_cancel_backend), at a random moment.
    Cancel,
    /// Past its statement_timeout.
    Timeout,
    /// Its client hangs up.
    HangUp,
    /// Its own `wait` runs out (NULL).
    Bounded,
    /// Cancelled inside a savepoint, which is rolled back; its transaction stays open.
    Caught,
    /// Waits until it is granted the key.
    Stay,
}

/// The churn test's wait on a plain client: up to 60 s, for a 10 s lease.
async fn wait_long(
    client: &tokio_postgres::Client,
    key: &str,
    owner: &str,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let sql = "SELECT dlock_fast_acquire($1, $2, '10s', '60s')";
    client.query_one(sql, &[&key, &owner]).await.map(|r| r.get(0))
}

/// [`wait_long`], cancelled every 5 ms from `after` on until it answers (a cancel that comes
/// before the call starts is lost).
async fn cancelled_after(
    client: &tokio_postgres::Client,
    canceller: &Session,
    pid: i32,
    key: &str,
    owner: &str,
    after: Duration,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let call = wait_long(client, key, owner);
    let cancel = async {
        tokio::time::sleep(after).await;
        loop {
            canceller.query_one("SELECT pg_cancel_backend($1)", &[&pid]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        r = call => r,
        _ = cancel => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waits_ending_at_random_moments_while_sessions_come_and_go_never_keep_a_place() {
    const T: &str = "churn";
    let cluster = Cluster::shared_named("fast-queue-churn", &[PRELOAD, "dlock.fast_max_ttl = 10"]);
    let observer = past_lock_delay(cluster).await;
    // Sessions come and go meanwhile, waiting briefly on keys of their own: their backends
    // reuse the waiter slots of those that ended.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churners: Vec<_> = (0..3)
        .map(|c| {
            let stop = stop.clone();
            tokio::spawn(async move {
                for n in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let (client, _, driver) = cluster.connect_client().await;
                    let (k, o) = (key(T, &format!("other-{c}-{}", n % 3)), owner(T, "churner"));
                    let sql = "SELECT dlock_fast_acquire($1, $2, '1s', '5 ms')";
                    if client.query_one(sql, &[&k, &o]).await.unwrap().get::<_, Option<i64>>(0).is_some() {
                        client.query_one("SELECT dlock_fast_release($1, $2)", &[&k, &o]).await.unwrap();
                    }
                    drop(client);
                    let _ = driver.await;
                }
            })
        })
        .collect();

    for round in 0..20 {
        let k = key(T, &format!("k{round}"));
        let holder_owner = owner(T, "holder");
        acquire(&observer, &k, &holder_owner, "10s", Some("0")).await.unwrap().expect("granted");
        let (mut enders, mut stayers) = (Vec::new(), Vec::new());
        for i in 0..8 {
            let end =
                [End::Cancel, End::Timeout, End::HangUp, End::Bounded, End::Caught, End::Stay, End::Stay]
                    [fastrand::usize(0..7)];
            let o = owner(T, &format!("r{round}-w{i}-{end:?}"));
            let (client, pid, driver) = cluster.connect_client().await;
            let after = Duration::from_millis(fastrand::u64(0..150));
            let k = k.clone();
            if let End::Stay = end {
                let stayer = o.clone();
                let task =
                    tokio::spawn(async move { (wait_long(&client, &k, &stayer).await, client, driver) });
                stayers.push((o, pid, task));
                continue;
            }
            let canceller = cluster.connect().await;
            enders.push(tokio::spawn(async move {
                let result = match end {
                    End::Cancel => Some(cancelled_after(&client, &canceller, pid, &k, &o, after).await),
                    End::Caught => {
                        client.batch_execute("BEGIN; SAVEPOINT before_wait").await.unwrap();
                        let r = cancelled_after(&client, &canceller, pid, &k, &o, after).await;
                        client.batch_execute("ROLLBACK TO SAVEPOINT before_wait").await.unwrap();
                        Some(r)
                    }
                    End::Timeout => {
                        client
                            .batch_execute(&format!("SET statement_timeout = {}", after.as_millis() + 1))
                            .await
                            .unwrap();
                        Some(wait_long(&client, &k, &o).await)
                    }
                    End::Bounded => {
                        let (sql, wait) = (
                            "SELECT dlock_fast_acquire($1, $2, '10s', $3::text::interval)",
                            format!("{} ms", after.as_millis() + 1),
                        );
                        Some(client.query_one(sql, &[&k, &o, &wait]).await.map(|r| r.get(0)))
                    }
                    End::HangUp => tokio::select! {
                        r = wait_long(&client, &k, &o) => Some(r),
                        _ = tokio::time::sleep(after) => None,
                    },
                    End::Stay => unreachable!(),
                };
                (end, o, pid, result, client, driver)
            }));
        }
        // Every wait that ends has ended before the release (a hung-up one's backend is gone);
        // a caught one's transaction stays open until the round ends.
        let mut open = Vec::new();
        for task in enders {
            let (end, o, pid, result, client, driver) =
                within(Duration::from_secs(20), "a wait that ends", task).await.unwrap();
            match (end, result) {
                (End::HangUp, result) => {
                    assert!(result.is_none_or(|r| r.is_err()), "{o}: answered while held");
                    driver.abort();
                    ended(&observer, pid).await;
                }
                (End::Bounded, Some(result)) => assert_eq!(result.unwrap(), None, "{o}"),
                (End::Caught, Some(result)) => {
                    expect_sqlstate(result, &SqlState::QUERY_CANCELED, &o);
                    open.push(client);
                }
                (_, Some(result)) => expect_sqlstate(result, &SqlState::QUERY_CANCELED, &o),
                (_, None) => unreachable!(),
            }
        }
        for (_, pid, _) in &stayers {
            asleep(&observer, *pid).await;
        }
        // Each release hands the key to one still waiting, with a fence above the last.
        let mut previous = holder_owner;
        let mut fence = 0;
        while !stayers.is_empty() {
            assert!(release(&observer, &k, &previous).await, "round {round}: {previous} releases");
            let next = holder(&observer, &k).await;
            let at = stayers.iter().position(|(o, _, _)| Some(o) == next.as_ref());
            let Some(at) = at else {
                panic!("round {round}: the key went to {next:?}, not to one still waiting")
            };
            let (o, _, task) = stayers.remove(at);
            let (result, _client, _driver) = within(Duration::from_secs(10), &o, task).await.unwrap();
            let granted = result.unwrap().expect("granted");
            assert!(granted > fence, "fences grow along the line");
            (previous, fence) = (o, granted);
        }
        assert!(release(&observer, &k, &previous).await);
        assert_eq!(holder(&observer, &k).await, None, "round {round}: the last release frees the key");
        for client in open {
            client.batch_execute("COMMIT").await.unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for churner in churners {
        churner.await.unwrap();
    }
}
