//! A waiter whose client hangs up leaves at once and is never handed a lease it cannot use: a
//! head checks its client's socket before every grant, and sleeps with the socket's close as
//! one of its wake events; a waiter queued in the lock manager hears of it by a signal.

use std::time::Duration;

use dlock_tests::{Cluster, eventually, key, owner, sql_edition, wait_for_waiters};
use tokio::task::JoinHandle;

/// Starts `dlock_acquire(key, owner, '30s', '30s')` on a connection of its own and returns the
/// backend pid and the task driving the connection: aborting that task closes the socket
/// mid-call, as a client that crashes or loses its network would.
///
/// The SQL edition cannot look at the socket from SQL: there PostgreSQL's own check does it,
/// every `client_connection_check_interval`, which the managed page tells its users to set (as
/// here, for the session; a role or database setting does the same).
async fn waiting_client(cluster: &Cluster, key: &str, owner: &str) -> (i32, JoinHandle<()>) {
    let (client, pid, driver) = cluster.connect_client().await;
    if sql_edition() {
        client.batch_execute("SET client_connection_check_interval = '100ms'").await.unwrap();
    }
    let (key, owner) = (key.to_string(), owner.to_string());
    tokio::spawn(async move {
        let _ = client.query_one("SELECT dlock_acquire($1, $2, '30s', '30s')", &[&key, &owner]).await;
    });
    (pid, driver)
}

#[tokio::test]
async fn a_head_whose_client_hung_up_is_never_granted() {
    const T: &str = "a_head_whose_client_hung_up_is_never_granted";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let o = owner(T, "holder");
    holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let (waiter_pid, connection) = waiting_client(cluster, &k, &owner(T, "gone")).await;
    wait_for_waiters(&observer, &k, 1).await;
    connection.abort(); // the client's socket closes mid-wait

    eventually(Duration::from_millis(500), "the waiter's backend ends at once", || async {
        let alive: bool = observer
            .query_one("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", &[&waiter_pid])
            .await
            .unwrap()
            .get(0);
        !alive
    })
    .await;
    assert_eq!(observer.waiters(&k).await.unwrap(), 0);
    assert!(holder.release(&k, &o).await.unwrap());
    let taken = observer.try_acquire(&k, &owner(T, "next"), "30s").await.unwrap();
    assert!(taken.is_some(), "no lease was handed to the client that hung up");
}

#[tokio::test]
async fn a_queued_waiter_whose_client_hung_up_leaves_the_queue() {
    const T: &str = "a_queued_waiter_whose_client_hung_up_leaves_the_queue";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let o = owner(T, "holder");
    holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let head = cluster.connect().await.spawn_acquire(&k, &owner(T, "head"), Some("30s"), Some("30s"));
    wait_for_waiters(&observer, &k, 1).await;
    let (_, queued) = waiting_client(cluster, &k, &owner(T, "queued")).await;
    wait_for_waiters(&observer, &k, 2).await;
    let hung_up_at = std::time::Instant::now();
    queued.abort();
    // The hang-up reaches a waiter queued in the lock manager as a signal, well before the
    // once-a-second connection check that backs it up.
    eventually(Duration::from_millis(500), "the queued waiter leaves at once", || async {
        observer.waiters(&k).await.unwrap() == 1
    })
    .await;
    eprintln!("queued waiter left {:?} after its client hung up", hung_up_at.elapsed());

    assert!(holder.release(&k, &o).await.unwrap());
    let granted =
        tokio::time::timeout(Duration::from_secs(2), head).await.expect("the head is granted").unwrap();
    assert!(granted.result.unwrap().is_some());
}
