//! The Rust client when things go wrong: the watchdog against a short ttl, the lost signal when
//! the connection is cut, server errors (statement_timeout, deadlock) mapped to `Error`
//! variants, and a session-bound guard dropped where no runtime is current.

use std::time::{Duration, Instant};

use dlock_client::deadpool_postgres::tokio_postgres::{self, NoTls};
use dlock_client::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use dlock_client::{Client, Error, SqlState};
use dlock_tests::{Cluster, eventually, key, wait_for_waiters, within};

mod common;
use common::{admin, free_for_others};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

const SECOND: Duration = Duration::from_secs(1);

/// A `tokio_postgres` configuration for the shared cluster as `postgres`, connecting to `port`
/// (the cluster's own, or a proxy's).
fn pg_config(port: u16) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(port).user("postgres").dbname("postgres");
    config
}

/// A client on a pool of our own making, with a fresh owner.
fn client_on(config: tokio_postgres::Config, max_size: usize) -> Client {
    let manager =
        Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Client::from_pool(Pool::builder(manager).max_size(max_size).build().expect("pool"))
}

/// An ordinary client of the shared cluster.
fn client() -> Client {
    client_on(pg_config(Cluster::shared().port()), 4)
}

/// A TCP proxy to the shared cluster that can be shut down: shutting it down drops every
/// connection it carries and closes its listening socket, so new connections are refused.
struct Proxy {
    port: u16,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Proxy {
        let target = Cluster::shared().port();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            // Owned by this task: aborting it drops the listener and aborts every connection.
            let mut connections = JoinSet::new();
            loop {
                let (mut inbound, _) = listener.accept().await.expect("proxy accept");
                connections.spawn(async move {
                    let mut outbound =
                        TcpStream::connect(("127.0.0.1", target)).await.expect("proxy connect");
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
                // Reap finished connections so the set does not grow.
                while connections.try_join_next().is_some() {}
            }
        });
        Proxy { port, task }
    }

    /// Cuts every connection and refuses new ones.
    async fn shut_down(self) {
        self.task.abort();
        assert!(self.task.await.unwrap_err().is_cancelled());
    }
}

#[tokio::test]
async fn watchdog_keeps_a_1s_lease_alive_for_5s() {
    let k = key("resilience_watchdog", "k");
    let guard = client().lock(&k).ttl(SECOND).acquire().await.unwrap();
    let other = admin().await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let taken = other.try_acquire(&k, "resilience_watchdog:other", "1s").await.unwrap();
        assert_eq!(taken, None, "another owner got the key after {:?}", start.elapsed());
        assert!(guard.is_held(), "the guard is still held after {:?}", start.elapsed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!guard.lost().is_cancelled());
    assert!(other.holds(&k, guard.fence()).await.unwrap());
    assert!(guard.release().await.unwrap());
    assert!(free_for_others(&k).await);
}

#[tokio::test]
async fn lost_fires_when_the_connection_is_cut() {
    let k = key("resilience_cut", "k");
    let proxy = Proxy::start().await;
    let client = client_on(pg_config(proxy.port), 4);
    let guard = client.lock(&k).ttl(SECOND).acquire().await.unwrap();
    let lost = guard.lost();
    // A few renewals through the proxy first.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(guard.is_held() && !lost.is_cancelled(), "renewals through the proxy keep the lease");
    assert!(!free_for_others(&k).await);

    proxy.shut_down().await;
    let cut = Instant::now();
    within(SECOND * 2, "lost fires within ttl + 1 s of the cut", lost.cancelled()).await;
    assert!(!guard.is_held(), "a lost guard is not held");
    // Unrenewed, the lease runs out on the server: another owner can take the key.
    eventually(SECOND * 3, "another owner takes the key after its ttl", || free_for_others(&k)).await;
    assert!(cut.elapsed() < SECOND * 4);
    let released = guard.release().await;
    assert!(
        matches!(released, Err(Error::Connection { .. })),
        "release with no way to the server: {released:?}"
    );
}

#[tokio::test]
async fn a_wait_cut_short_by_statement_timeout_is_cancelled() {
    let k = key("resilience_statement_timeout", "k");
    let holder = client().lock(&k).acquire().await.unwrap();
    let mut config = pg_config(Cluster::shared().port());
    config.options("-c statement_timeout=300");
    let impatient = client_on(config, 2);
    let start = Instant::now();
    let outcome = within(SECOND * 3, "the wait ends", impatient.lock(&k).wait(SECOND * 5).acquire()).await;
    match outcome {
        Err(Error::Cancelled(m)) => assert_eq!(m.code(), &SqlState::QUERY_CANCELED),
        other => panic!("expected Err(Cancelled), got {other:?}"),
    }
    assert!(start.elapsed() >= Duration::from_millis(250), "cut short by the timeout, not at once");
    // A cancelled wait leaves no trace: no waiter, and the holder keeps the key.
    assert_eq!(admin().await.waiters(&k).await.unwrap(), 0);
    assert!(holder.holds().await.unwrap());
    assert!(holder.release().await.unwrap());
}

/// The client's waits run on a pooled connection, and a session-bound guard keeps its own
/// connection out of the pool: two guards' waits never form a cycle in the lock manager. A
/// session-bound lease that is leaked goes back to the pool with its connection, so with one
/// connection per pool the wait for the other key runs on the session that holds the first.
#[tokio::test]
async fn waiting_for_each_others_session_bound_leases_is_a_deadlock_for_one_side() {
    let (k1, k2) = (key("resilience_deadlock", "k1"), key("resilience_deadlock", "k2"));
    let port = Cluster::shared().port();
    let (a, b) = (client_on(pg_config(port), 1), client_on(pg_config(port), 1));
    a.lock(&k1).session_bound().acquire().await.unwrap().leak();
    b.lock(&k2).session_bound().acquire().await.unwrap().leak();

    let started = Instant::now();
    let mut a_waits = tokio::spawn(a.lock(&k2).wait_forever().acquire());
    wait_for_waiters(&admin().await, &k2, 1).await;
    let mut b_waits = tokio::spawn(b.lock(&k1).wait_forever().acquire());
    let (victim, survivor, victim_client) = within(SECOND * 10, "the cycle is broken", async {
        tokio::select! {
            outcome = &mut a_waits => (outcome.unwrap(), b_waits, a),
            outcome = &mut b_waits => (outcome.unwrap(), a_waits, b),
        }
    })
    .await;
    assert!(started.elapsed() < SECOND * 10);
    match victim {
        Err(Error::Deadlock(m)) => assert_eq!(m.code(), &SqlState::T_R_DEADLOCK_DETECTED),
        other => panic!("expected Err(Deadlock), got {other:?}"),
    }
    assert!(!survivor.is_finished(), "only one side is the victim");

    // The victim gives up: closing its pool ends its session and its session-bound lease.
    drop(victim_client);
    let granted = within(SECOND * 5, "the survivor is granted", survivor).await.unwrap().unwrap();
    assert!(granted.release().await.unwrap());
    // The survivor's own leaked lease ends with its pool too (owned by the spawned future's
    // client, already dropped): the keys end up free.
    eventually(SECOND * 3, "both keys end up free", || async {
        free_for_others(&k1).await && free_for_others(&k2).await
    })
    .await;
}

#[tokio::test]
async fn a_guard_dropped_outside_a_runtime_leaves_a_session_bound_lease_to_end_with_its_connection() {
    let k = key("resilience_drop_no_runtime", "k");
    // A runtime whose workers keep running (so the connection task can close the socket), but
    // that the dropping thread has not entered.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let key_for_thread = k.clone();
    let (guard, runtime) = std::thread::spawn(move || {
        let guard = runtime.block_on(client().lock(&key_for_thread).session_bound().acquire()).unwrap();
        (guard, runtime)
    })
    .join()
    .unwrap();
    assert!(!free_for_others(&k).await, "held while the guard lives");
    std::thread::spawn(move || {
        assert!(tokio::runtime::Handle::try_current().is_err(), "no runtime is current here");
        drop(guard);
    })
    .join()
    .unwrap();
    eventually(SECOND * 2, "the closed connection ends the session-bound lease", || free_for_others(&k))
        .await;
    std::thread::spawn(move || drop(runtime)).join().unwrap();
}
