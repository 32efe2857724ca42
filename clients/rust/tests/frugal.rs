//! Connection-frugal waiting: waits share the client's one listener connection instead of
//! holding a pooled connection each, and are woken by the server's notifications (release,
//! force release, the holder's session ending), by the blocking lease's expiry, and survive the
//! listener being cut.
//!
//! Some waits below are given deadlines shorter than the client's safety re-check (2 s): they
//! can only be granted in time if the notification arrived.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use dlock_client::{Client, DEFAULT_POOL_SIZE, Error};
use dlock_tests::{Cluster, key, wait_for_watchers, within};
use tokio::time::Instant;

mod common;
use common::{admin, free_for_others};

const SECOND: Duration = Duration::from_secs(1);
/// Shorter than the client's safety re-check: a wait this long is only granted if notified.
const NOTIFIED_WAIT: Duration = Duration::from_millis(1500);

fn client_named(application: &str) -> Client {
    let port = Cluster::shared().port();
    Client::connect_lazy(&format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres application_name={application}"
    ))
    .expect("client config")
}

fn client() -> Client {
    client_named("dlock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiters_on_a_hundred_keys_share_sixteen_connections() {
    const KEYS: usize = 100;
    const WAITERS: usize = 1000;
    const APP: &str = "frugal_thousand";
    let keys: Vec<String> = (0..KEYS).map(|i| key("thousand", &i.to_string())).collect();
    let holders = client();
    let mut held = Vec::new();
    for k in &keys {
        held.push(holders.lock(k).acquire().await.unwrap());
    }

    // Count this client's server connections while the test runs.
    let observer = admin().await;
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut most = 0i64;
            while !done.load(Ordering::Relaxed) {
                let n: i64 = observer
                    .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&APP])
                    .await
                    .unwrap()
                    .get(0);
                most = most.max(n);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };

    let waiters = client_named(APP);
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
    let freed_at: Arc<Vec<std::sync::Mutex<Option<Instant>>>> =
        Arc::new((0..KEYS).map(|_| std::sync::Mutex::new(None)).collect());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let slot = i % KEYS;
        let (k, client) = (keys[slot].clone(), waiters.with_owner(format!("thousand-waiter-{i}")));
        let (busy, freed_at, overlaps) = (busy.clone(), freed_at.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.lock(&k).ttl(SECOND * 30).wait(SECOND * 60).acquire().await?;
            let granted = Instant::now();
            let lag = freed_at[slot].lock().unwrap().map(|f| granted.saturating_duration_since(f));
            if busy[slot].swap(true, Ordering::SeqCst) {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            busy[slot].store(false, Ordering::SeqCst);
            let fence = guard.fence();
            let ours = guard.release().await?;
            *freed_at[slot].lock().unwrap() = Some(Instant::now());
            Ok::<_, Error>((fence, ours, lag))
        }));
    }
    let lined_up = admin().await;
    for k in &keys {
        wait_for_watchers(&lined_up, k, 1).await;
    }
    let started = Instant::now();
    for (slot, guard) in held.into_iter().enumerate() {
        assert!(guard.release().await.unwrap());
        *freed_at[slot].lock().unwrap() = Some(Instant::now());
    }

    let mut lags = Vec::new();
    let mut fences = HashMap::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let (fence, ours, lag) =
            within(SECOND * 60, "every waiter is granted", task).await.unwrap().expect("granted");
        assert!(ours, "waiter {i} still held its lease at release");
        assert!(fences.insert(fence, i).is_none(), "fence {fence} granted twice");
        lags.extend(lag);
    }
    let elapsed = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let most = sampler.await.unwrap();
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders of one key at once");
    assert_eq!(fences.len(), WAITERS, "every waiter granted exactly once");
    assert!(most >= 2, "the sampler saw the client's connections ({most})");
    assert!(most <= DEFAULT_POOL_SIZE as i64, "{most} connections for {WAITERS} waiters");

    lags.sort();
    let pct = |p: f64| lags[((lags.len() - 1) as f64 * p) as usize];
    println!(
        "frugal: {WAITERS} waiters on {KEYS} keys, {most} connections at most, {elapsed:?} in all; \
         grant after the key was freed: p50 {:?} p99 {:?} max {:?}, {} of {} over 50 ms",
        pct(0.5),
        pct(0.99),
        lags.last().unwrap(),
        lags.iter().filter(|l| **l > Duration::from_millis(50)).count(),
        lags.len()
    );
}

#[tokio::test]
async fn waiters_of_a_key_in_one_client_are_granted_in_arrival_order() {
    let k = key("frugal_fifo", "k");
    let holder = client().lock(&k).acquire().await.unwrap();
    let waiters = client();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (client, k, order) = (waiters.with_owner(format!("fifo-{i}")), k.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.lock(&k).wait(SECOND * 20).acquire().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(guard.release().await.unwrap());
        }));
        // Arrival order: each waiter is in line before the next one comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(holder.release().await.unwrap());
    for task in tasks {
        within(SECOND * 20, "every waiter is granted", task).await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_wait_is_woken_by_release_force_release_and_the_holders_session_ending() {
    let k = key("frugal_wakeups", "k");
    let (holder, waiter) = (client(), client());

    // Release.
    let guard = holder.lock(&k).ttl(SECOND * 60).acquire().await.unwrap();
    let waiting = tokio::spawn(waiter.lock(&k).wait(NOTIFIED_WAIT).acquire());
    wait_for_watchers(&admin().await, &k, 1).await;
    assert!(guard.release().await.unwrap());
    let granted = waiting.await.unwrap().expect("woken by the release");
    assert!(granted.release().await.unwrap());

    // Force release.
    holder.lock(&k).ttl(SECOND * 60).acquire().await.unwrap().leak();
    let waiting = tokio::spawn(waiter.lock(&k).wait(NOTIFIED_WAIT).acquire());
    wait_for_watchers(&admin().await, &k, 1).await;
    assert!(admin().await.force_release(&k).await.unwrap());
    let granted = waiting.await.unwrap().expect("woken by the force release");
    assert!(granted.release().await.unwrap());

    // A session-bound holder whose connection closes.
    let session_holder = client();
    session_holder.lock(&k).session_bound().acquire().await.unwrap().leak();
    let waiting = tokio::spawn(waiter.lock(&k).session_bound().wait(NOTIFIED_WAIT).acquire());
    wait_for_watchers(&admin().await, &k, 1).await;
    drop(session_holder); // closes its pool, so the session ends
    let granted = waiting.await.unwrap().expect("woken by the holder's session ending");
    assert!(granted.expires_at().is_none(), "a session-bound grant");
    assert!(granted.release().await.unwrap());
}

#[tokio::test]
async fn a_wait_for_an_expiring_lease_needs_no_notification() {
    let k = key("frugal_expiry", "k");
    let holder = client().lock(&k).ttl(SECOND).watchdog(false).acquire().await.unwrap();
    let started = Instant::now();
    let granted = client().lock(&k).wait(SECOND * 10).acquire().await.expect("granted at expiry");
    assert!(started.elapsed() >= Duration::from_millis(500), "not before the lease ran out");
    assert!(granted.fence() > holder.fence());
    assert!(granted.release().await.unwrap());
}

#[tokio::test]
async fn a_wait_survives_its_listener_being_cut() {
    let k = key("frugal_listener_cut", "k");
    const APP: &str = "frugal_cut";
    let guard = client().lock(&k).ttl(SECOND * 60).acquire().await.unwrap();
    let waiter = client_named(APP);
    let waiting = tokio::spawn(waiter.lock(&k).wait(SECOND * 10).acquire());
    let observer = admin().await;
    wait_for_watchers(&observer, &k, 1).await;
    let cut: i64 = observer
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
              WHERE application_name = $1 AND query LIKE '%dlock_watch%'",
            &[&APP],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(cut, 1, "one listener");
    // The wait re-watches on a new listener; the release then wakes it.
    wait_for_watchers(&observer, &k, 1).await;
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let granted = within(SECOND * 10, "the wait ends", waiting).await.unwrap().expect("granted");
    assert!(released.elapsed() < SECOND * 10);
    assert!(granted.release().await.unwrap());
}

#[tokio::test]
async fn a_wait_that_runs_out_is_a_timeout_and_stops_watching() {
    let k = key("frugal_timeout", "k");
    let guard = client().lock(&k).ttl(SECOND * 60).acquire().await.unwrap();
    let started = Instant::now();
    let outcome = client().lock(&k).wait(Duration::from_millis(400)).acquire().await;
    assert!(matches!(outcome, Err(Error::Timeout)), "{outcome:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    wait_for_watchers(&admin().await, &k, 0).await;
    assert!(guard.holds().await.unwrap(), "the holder keeps the key");
    assert!(guard.release().await.unwrap());
    assert!(free_for_others(&k).await, "the timed-out waiter got nothing");
}

#[tokio::test]
async fn a_client_on_a_pool_of_its_own_waits_on_a_listener_too() {
    const APP: &str = "frugal_own_pool";
    let k = key("frugal_own_pool", "k");
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(Cluster::shared().port())
        .user("postgres")
        .dbname("postgres")
        .application_name(APP);
    let manager = deadpool_postgres::Manager::new(config.clone(), tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager).max_size(1).build().unwrap();
    let waiters = Client::from_pool_with_listener(pool, config);
    let holder = client().lock(&k).ttl(SECOND * 60).acquire().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..10 {
        let lock = waiters.with_owner(format!("own-pool-{i}")).lock(&k).wait(SECOND * 30);
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await?;
            guard.release().await
        }));
    }
    let observer = admin().await;
    wait_for_watchers(&observer, &k, 1).await;
    let connections: i64 = observer
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&APP])
        .await
        .unwrap()
        .get(0);
    assert!(connections <= 2, "ten waits on a pool of one: {connections} connections");
    assert!(holder.release().await.unwrap());
    for task in tasks {
        assert!(within(SECOND * 30, "every waiter is granted", task).await.unwrap().unwrap());
    }
}
