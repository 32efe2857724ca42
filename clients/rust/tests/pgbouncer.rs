//! The Rust client behind pgbouncer (1.18) in transaction pooling mode (issue 7).
//!
//! In the default mode ([`PoolerMode::Session`]) the client fails there, as the first tests
//! document:
//! - The client prepares its statements once per pooled connection (named prepared statements,
//!   `prepare_cached`). Through transaction pooling a statement prepared on one server
//!   connection is later run on another, which has never heard of it: the call fails with
//!   `Error::Database` 26000. It only works while every call lands on the server connection that
//!   prepared it (a pool of one server connection, or a quiet one, by luck).
//! - The client's default waiting LISTENs on a listener connection; through transaction pooling
//!   the LISTEN stays on a pooled server session and its notifications never reach the client.
//!   Waits still end: at the blocking lease's expiry (the server's `retry_after`), or at the
//!   2 s re-check when the holder is session-bound — not when the key is released.
//! - A session-bound guard's connection is a connection to pgbouncer, not the lease's session:
//!   closing it does not end the lease.
//!
//! In [`PoolerMode::Transaction`] (`Client::builder(url).pooler(..)`, or `dlock_pooler=transaction`
//! in the URL) the same scenarios pass: nothing is prepared, waits retry and notice a release
//! within the longest pause between tries, and session-bound leases (and waits in the server's
//! queue, which would hold server connections) are refused up front.
//! Many waiters through a small pool: `pgbouncer_waiters.rs`.

use std::time::Duration;

use dlock_client::deadpool_postgres::tokio_postgres::{self, NoTls, SimpleQueryMessage};
use dlock_client::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use dlock_client::{Client, Error, PoolerMode, SqlState};
use dlock_tests::{CLOCK_SLACK, Cluster, Pgbouncer, Session, eventually, key, wait_for_watchers, within};

const SECOND: Duration = Duration::from_secs(1);
/// Generous limit on anything that should happen promptly (never a measurement).
const PROMPTLY: Duration = Duration::from_secs(20);

/// A client of the cluster itself (no pooler in between).
async fn direct_client(cluster: &Cluster) -> Client {
    Client::connect(&format!("postgresql://postgres@127.0.0.1:{}/postgres", cluster.port()))
        .await
        .expect("connect")
}

/// Opens a transaction through the pooler, which pins one server connection to this client
/// until `COMMIT`; returns the client and the pinned server backend's pid.
async fn pin_a_server_connection(bouncer: &Pgbouncer) -> (tokio_postgres::Client, i32) {
    let client = bouncer.client("postgres").await;
    let messages = client.simple_query("BEGIN; SELECT pg_catalog.pg_backend_pid()").await.expect("BEGIN");
    let pid = messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(|pid| pid.parse::<i32>().expect("a pid")),
            _ => None,
        })
        .expect("a pid row");
    (client, pid)
}

async fn commit(client: &tokio_postgres::Client) {
    client.simple_query("COMMIT").await.expect("COMMIT");
}

#[tokio::test]
async fn a_statement_prepared_on_one_server_connection_fails_on_another_with_26000() {
    const T: &str = "client_pgbouncer_prepared";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 2).await;
    let observer = cluster.connect().await;
    let client = Client::connect(&bouncer.url()).await.unwrap();
    let (k1, k2) = (key(T, "k1"), key(T, "k2"));

    // Server connection 1 is busy: the first acquire is prepared and run on server connection 2.
    let (pin1, pid1) = pin_a_server_connection(&bouncer).await;
    let guard =
        client.lock(&k1).watchdog(false).acquire().await.expect("an acquire on one server connection");
    let holder = observer.lease(&k1).await.unwrap().expect("held").holder_pid;
    assert_ne!(holder, Some(pid1));
    // Now the other way round: the client's cached statement can only run on server connection 1.
    let (pin2, pid2) = pin_a_server_connection(&bouncer).await;
    assert_eq!(holder, Some(pid2));
    commit(&pin1).await;
    match client.lock(&k2).watchdog(false).acquire().await {
        Err(Error::Database(m)) => {
            assert_eq!(m.code(), &SqlState::INVALID_SQL_STATEMENT_NAME, "{m:?}");
            assert!(m.message().contains("prepared statement"), "{m:?}");
        }
        other => panic!("expected Err(Database 26000), got {other:?}"),
    }
    assert_eq!(observer.lease(&k2).await.unwrap(), None, "the failed acquire took nothing");
    commit(&pin2).await;

    // Cleanup: the first guard's release prepares a new statement, which may or may not run
    // on the server connection that prepared it.
    let _ = guard.release().await;
    if observer.lease(&k1).await.unwrap().is_some() {
        assert!(observer.force_release(&k1).await.unwrap());
    }
}

#[tokio::test]
async fn a_waiting_acquire_misses_the_release_and_is_granted_when_the_lease_would_have_expired() {
    const T: &str = "client_pgbouncer_wait_ttl";
    let cluster = Cluster::shared();
    // One server connection: every statement of the client runs where it was prepared.
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let holder =
        direct_client(cluster).await.lock(&k).ttl(SECOND * 6).watchdog(false).acquire().await.unwrap();
    let expires_at = observer.lease(&k).await.unwrap().expect("held").expires_at.expect("a ttl lease");

    let waiter = Client::connect(&bouncer.url()).await.unwrap();
    let kw = k.clone();
    let wait =
        tokio::spawn(async move { waiter.lock(&kw).ttl(SECOND * 30).wait(SECOND * 60).acquire().await });
    // The waiter's listener watches the key (on the pooled server session) and has tried once.
    wait_for_watchers(&observer, &k, 1).await;
    let released_at = observer.server_now().await.unwrap();
    assert!(holder.release().await.unwrap());
    assert!(released_at < expires_at - 2.0, "released well before the lease's expiry");

    // The notification of the release never reaches the waiter: it sleeps on until the time
    // the server gave it, the released lease's expiry, and only then tries again.
    let guard = within(PROMPTLY, "the waiter is granted", wait).await.unwrap().expect("granted");
    let acquired_at = observer.lease(&k).await.unwrap().expect("held by the waiter").acquired_at;
    assert!(
        acquired_at >= expires_at - CLOCK_SLACK,
        "granted at {acquired_at}, before the released lease's expiry {expires_at}: the release was noticed"
    );
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn a_waiting_acquire_behind_a_session_bound_holder_falls_back_to_the_2s_recheck() {
    const T: &str = "client_pgbouncer_wait_session";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let holder = direct_client(cluster).await.lock(&k).session_bound().acquire().await.unwrap();

    let waiter = Client::connect(&bouncer.url()).await.unwrap();
    let kw = k.clone();
    let wait =
        tokio::spawn(async move { waiter.lock(&kw).ttl(SECOND * 30).wait(SECOND * 60).acquire().await });
    wait_for_watchers(&observer, &k, 1).await;
    let released_at = observer.server_now().await.unwrap();
    assert!(holder.release().await.unwrap());
    // No notification, no expiry to wait for: the re-check (every 2 s) finds the key free.
    let guard = within(PROMPTLY, "the waiter is granted", wait).await.unwrap().expect("granted");
    let acquired_at = observer.lease(&k).await.unwrap().expect("held by the waiter").acquired_at;
    assert!(acquired_at >= released_at - CLOCK_SLACK);
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn a_session_bound_guard_closing_its_connection_to_pgbouncer_leaves_the_lease_held() {
    const T: &str = "client_pgbouncer_session_bound";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (url, key_for_thread) = (bouncer.url(), k.clone());
    let (guard, owner, runtime) = std::thread::spawn(move || {
        let client = runtime.block_on(Client::connect(&url)).unwrap();
        let guard = runtime.block_on(client.lock(&key_for_thread).session_bound().acquire()).unwrap();
        (guard, client.owner().to_string(), runtime)
    })
    .join()
    .unwrap();
    let fence = guard.fence();
    let clients_before = bouncer.pool_count("cl_active").await;
    // Dropped where no runtime is current, the guard closes its connection instead of releasing
    // (which ends a session-bound lease on a direct connection, see resilience.rs).
    std::thread::spawn(move || drop(guard)).join().unwrap();
    eventually(PROMPTLY, "pgbouncer sees the guard's connection close", || async {
        bouncer.pool_count("cl_active").await < clients_before
    })
    .await;
    // Through pgbouncer the lease's session is the pooled server session, which lives on.
    assert!(observer.holds(&k, fence).await.unwrap(), "the lease ended with the guard's connection");
    assert_eq!(observer.lease(&k).await.unwrap().and_then(|row| row.owner), Some(owner.clone()));
    assert!(release_as(&observer, &k, &owner).await, "its owner can still release it");
    std::thread::spawn(move || drop(runtime)).join().unwrap();
}

async fn release_as(session: &Session, key: &str, owner: &str) -> bool {
    session.release(key, owner).await.expect("dlock_release")
}

/// A client through the pooler in transaction mode, pausing at most 100 ms between tries.
async fn transaction_client(bouncer: &Pgbouncer) -> Client {
    Client::builder(&bouncer.url())
        .pooler(PoolerMode::Transaction)
        .max_poll_interval(Duration::from_millis(100))
        .connect()
        .await
        .expect("connect through pgbouncer")
}

#[tokio::test]
async fn in_transaction_mode_nothing_is_prepared_so_any_server_connection_serves_any_call() {
    const T: &str = "client_pgbouncer_tx_prepared";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 2).await;
    let observer = cluster.connect().await;
    let client = transaction_client(&bouncer).await;
    let (k1, k2) = (key(T, "k1"), key(T, "k2"));

    // The same dance as in session mode: the first acquire runs on server connection 2...
    let (pin1, pid1) = pin_a_server_connection(&bouncer).await;
    let guard = client.lock(&k1).watchdog(false).acquire().await.expect("acquire on one server connection");
    assert_ne!(observer.lease(&k1).await.unwrap().expect("held").holder_pid, Some(pid1));
    // ...and the second on server connection 1, which never saw a statement of the client.
    let (pin2, _pid2) = pin_a_server_connection(&bouncer).await;
    commit(&pin1).await;
    let second =
        client.lock(&k2).watchdog(false).acquire().await.expect("an acquire on the other server connection");
    let holder = observer.lease(&k2).await.unwrap().expect("held").holder_pid;
    assert_eq!(holder, Some(pid1), "ran where nothing was prepared");
    assert!(second.renew().await.unwrap().is_some());
    assert!(second.holds().await.unwrap());
    commit(&pin2).await;
    assert!(second.release().await.unwrap());
    assert!(guard.release().await.unwrap(), "released wherever it runs");
    assert_eq!(observer.lease(&k1).await.unwrap(), None);
}

#[tokio::test]
async fn in_transaction_mode_a_waiting_acquire_notices_the_release_long_before_the_expiry() {
    const T: &str = "client_pgbouncer_tx_wait_ttl";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let holder =
        direct_client(cluster).await.lock(&k).ttl(SECOND * 6).watchdog(false).acquire().await.unwrap();
    let expires_at = observer.lease(&k).await.unwrap().expect("held").expires_at.expect("a ttl lease");

    let waiter = transaction_client(&bouncer).await;
    let kw = k.clone();
    let wait =
        tokio::spawn(async move { waiter.lock(&kw).ttl(SECOND * 30).wait(SECOND * 60).acquire().await });
    // Give the waiter time to find the key busy (it watches nothing: there is nothing to see).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!wait.is_finished(), "the key is held");
    let released_at = observer.server_now().await.unwrap();
    assert!(holder.release().await.unwrap());

    let guard = within(PROMPTLY, "the waiter is granted", wait).await.unwrap().expect("granted");
    let acquired_at = observer.lease(&k).await.unwrap().expect("held by the waiter").acquired_at;
    assert!(acquired_at >= released_at - CLOCK_SLACK);
    assert!(
        acquired_at < expires_at - 2.0,
        "granted at {acquired_at}, not long before the released lease's expiry {expires_at}"
    );
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn in_transaction_mode_a_wait_behind_a_session_bound_holder_ends_soon_after_the_release() {
    const T: &str = "client_pgbouncer_tx_wait_session";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let holder = direct_client(cluster).await.lock(&k).session_bound().acquire().await.unwrap();

    let waiter = transaction_client(&bouncer).await;
    let kw = k.clone();
    let wait =
        tokio::spawn(async move { waiter.lock(&kw).ttl(SECOND * 30).wait(SECOND * 60).acquire().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = observer.server_now().await.unwrap();
    assert!(holder.release().await.unwrap());
    let guard = within(PROMPTLY, "the waiter is granted", wait).await.unwrap().expect("granted");
    let acquired_at = observer.lease(&k).await.unwrap().expect("held by the waiter").acquired_at;
    // Pauses of at most 100 ms: well within the session mode's 2 s re-check.
    assert!(acquired_at >= released_at - CLOCK_SLACK);
    assert!(acquired_at < released_at + 1.5, "granted {} s after the release", acquired_at - released_at);
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn in_transaction_mode_session_bound_leases_and_waits_in_the_servers_queue_are_refused() {
    const T: &str = "client_pgbouncer_tx_session_bound";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    // The mode from the builder, or from the connection string.
    let from_url = Client::connect(&format!("{}?dlock_pooler=transaction", bouncer.url())).await.unwrap();
    assert_eq!(from_url.pooler(), PoolerMode::Transaction);
    for client in [transaction_client(&bouncer).await, from_url] {
        match client.lock(&k).session_bound().acquire().await {
            Err(e @ Error::Unsupported(_)) => assert!(e.to_string().contains("transaction pooler"), "{e}"),
            other => panic!("expected Err(Unsupported), got {other:?}"),
        }
        let outcome = client.with_lock(client.lock(&k).session_bound(), |_| async {}).await;
        assert!(matches!(outcome, Err(Error::Unsupported(_))), "{outcome:?}");
        assert_eq!(observer.lease(&k).await.unwrap(), None, "nothing was taken");
        // A wait in the server's queue would hold one of the pooler's server connections.
        let queued = client.lock(&k).server_queue().wait(SECOND).acquire().await;
        assert!(matches!(&queued, Err(Error::Unsupported(m)) if m.contains("server's queue")), "{queued:?}");
        assert_eq!(observer.lease(&k).await.unwrap(), None, "nothing was taken");
        // A lease with a ttl is fine, and so is server_queue without a wait.
        let guard = client.lock(&k).acquire().await.unwrap();
        assert!(guard.release().await.unwrap());
        let guard = client.lock(&k).server_queue().acquire().await.unwrap();
        assert!(guard.release().await.unwrap());
    }
}

#[tokio::test]
async fn in_transaction_mode_wait_free_waits_for_a_lease_taken_on_the_same_server_connection() {
    const T: &str = "client_pgbouncer_tx_wait_free";
    let cluster = Cluster::shared();
    // One server connection: the lease and every look at the key share one server session,
    // although they are two clients'.
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let (holder, looker) = (transaction_client(&bouncer).await, transaction_client(&bouncer).await);
    let k = key(T, "k");
    let guard = holder.lock(&k).acquire().await.unwrap();
    assert!(!looker.wait_free(&k, Duration::ZERO).await.unwrap(), "held: not free, not HeldHere");
    let started = std::time::Instant::now();
    assert!(!looker.wait_free(&k, Duration::from_millis(300)).await.unwrap(), "the wait elapses");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let waiting = tokio::spawn({
        let (looker, k) = (looker.clone(), k.clone());
        async move { looker.wait_free(&k, Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.release().await.unwrap());
    assert!(within(Duration::from_secs(5), "the release is noticed", waiting).await.unwrap().unwrap());
    assert!(looker.wait_free(&k, Duration::ZERO).await.unwrap());
}

#[tokio::test]
async fn a_pool_of_the_applications_behind_a_transaction_pooler_retries_its_waits() {
    const T: &str = "client_pgbouncer_tx_from_pool";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 2).await;
    let observer = cluster.connect().await;
    let config: tokio_postgres::Config = bouncer.url().parse().unwrap();
    let manager =
        Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    let client = Client::from_pool_with_pooler(
        Pool::builder(manager).max_size(2).build().unwrap(),
        PoolerMode::Transaction,
    );
    assert_eq!(client.pooler(), PoolerMode::Transaction);
    let k = key(T, "k");
    let guard = transaction_client(&bouncer).await.lock(&k).acquire().await.unwrap();
    let waiting = tokio::spawn({
        let (client, k) = (client.clone(), k.clone());
        async move { client.lock(&k).wait(PROMPTLY).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(observer.waiters(&k).await.unwrap(), 0, "the wait retries rather than queueing on the server");
    assert!(guard.release().await.unwrap());
    let granted = within(Duration::from_secs(5), "the waiter is granted", waiting).await.unwrap().unwrap();
    assert!(granted.renew().await.unwrap().is_some() && granted.holds().await.unwrap());
    let bound = client.lock(key(T, "bound")).session_bound().acquire().await;
    assert!(matches!(bound, Err(Error::Unsupported(_))), "{bound:?}");
    assert!(granted.release().await.unwrap());
}
