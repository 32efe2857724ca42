//! Calls are transactional: a rolled-back grant never happened, and while a transaction that
//! acquired or released a key is open the key is busy for everyone else.

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, finish, key, owner};

const LIMIT: Duration = Duration::from_secs(15);
/// The most a grant may lag behind the COMMIT / ROLLBACK that freed the key.
const GRANT_LAG: Duration = Duration::from_secs(2);
/// A `wait = 0` try must answer well within this, never block on the open transaction.
const AT_ONCE: Duration = Duration::from_secs(1);

#[tokio::test]
async fn rolled_back_grant_never_happened() {
    const T: &str = "rolled_back_grant_never_happened";
    let cluster = Cluster::shared();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "a"));

    a.batch_execute("BEGIN").await.unwrap();
    let fence = a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted inside BEGIN");
    a.batch_execute("ROLLBACK").await.unwrap();

    assert_eq!(b.lease(&k).await.unwrap(), None, "no lease after ROLLBACK");
    assert!(!b.holds(&k, fence).await.unwrap(), "holds() on a rolled-back fence");
    assert_eq!(a.renew(&k, &o, Some("30s")).await.unwrap(), None, "renew of a rolled-back grant");
    assert!(!a.release(&k, &o).await.unwrap(), "release of a rolled-back grant");
    assert!(b.try_acquire(&k, &owner(T, "b"), "30s").await.unwrap().is_some(), "the key is free");
}

#[tokio::test]
async fn rolled_back_reentrant_grant_renew_and_release_are_undone() {
    const T: &str = "rolled_back_reentrant_grant_renew_and_release_are_undone";
    let cluster = Cluster::shared();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "a"));
    let fence = a.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let before = b.lease(&k).await.unwrap().unwrap();

    a.batch_execute("BEGIN").await.unwrap();
    assert_eq!(a.try_acquire(&k, &o, "60s").await.unwrap(), Some(fence));
    a.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(b.lease(&k).await.unwrap(), Some(before.clone()), "reentrant grant undone");

    a.batch_execute("BEGIN").await.unwrap();
    assert!(a.renew(&k, &o, Some("90s")).await.unwrap().is_some());
    a.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(b.lease(&k).await.unwrap(), Some(before.clone()), "renew undone");

    a.batch_execute("BEGIN").await.unwrap();
    assert!(a.release(&k, &o).await.unwrap());
    a.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(b.lease(&k).await.unwrap(), Some(before), "release undone");
    assert!(b.holds(&k, fence).await.unwrap());
}

#[tokio::test]
async fn open_transaction_that_acquired_makes_the_key_busy_until_rollback() {
    const T: &str = "open_transaction_that_acquired_makes_the_key_busy_until_rollback";
    let cluster = Cluster::shared();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");

    a.batch_execute("BEGIN").await.unwrap();
    let fence = a.try_acquire(&k, &owner(T, "a"), "30s").await.unwrap().unwrap();

    let started = Instant::now();
    assert_eq!(b.try_acquire(&k, &owner(T, "b"), "30s").await.unwrap(), None, "wait = 0 try");
    assert_eq!(b.acquire_default_wait(&k, &owner(T, "b"), Some("30s")).await.unwrap(), None);
    assert!(started.elapsed() < AT_ONCE, "tries answered after {:?}", started.elapsed());

    let waiter = b.spawn_acquire(&k, &owner(T, "b"), Some("30s"), Some("10s"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the wait goes on while the transaction is open");

    let rolled_back_at = Instant::now();
    a.batch_execute("ROLLBACK").await.unwrap();
    let attempt = finish(waiter, LIMIT, "waiter after ROLLBACK").await;
    let granted = attempt.result.unwrap().expect("granted once the grant is rolled back");
    assert!(attempt.finished_at >= rolled_back_at);
    assert!(attempt.finished_at.duration_since(rolled_back_at) < GRANT_LAG);
    assert_ne!(granted, fence, "a new grant, not the rolled-back one");
    assert!(a.holds(&k, granted).await.unwrap());
}

#[tokio::test]
async fn open_transaction_that_released_makes_the_key_busy_until_commit() {
    const T: &str = "open_transaction_that_released_makes_the_key_busy_until_commit";
    let cluster = Cluster::shared();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "a"));
    let fence = a.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    a.batch_execute("BEGIN").await.unwrap();
    assert!(a.release(&k, &o).await.unwrap());

    let started = Instant::now();
    assert_eq!(b.try_acquire(&k, &owner(T, "b"), "30s").await.unwrap(), None, "wait = 0 try");
    assert!(started.elapsed() < AT_ONCE, "the try answered after {:?}", started.elapsed());

    let waiter = b.spawn_acquire(&k, &owner(T, "b"), Some("30s"), Some("10s"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the wait goes on while the release is uncommitted");

    let committed_at = Instant::now();
    a.batch_execute("COMMIT").await.unwrap();
    let attempt = finish(waiter, LIMIT, "waiter after COMMIT").await;
    let granted = attempt.result.unwrap().expect("granted once the release commits");
    assert!(granted > fence, "fence {granted} after {fence}");
    assert!(attempt.finished_at.duration_since(committed_at) < GRANT_LAG);
}

#[tokio::test]
async fn open_transaction_that_renewed_makes_the_key_busy() {
    const T: &str = "open_transaction_that_renewed_makes_the_key_busy";
    let cluster = Cluster::shared();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "a"));
    // A lease that expires while the renewing transaction is still open.
    let fence = a.try_acquire(&k, &o, "300ms").await.unwrap().unwrap();

    a.batch_execute("BEGIN").await.unwrap();
    assert!(a.renew(&k, &o, Some("30s")).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started = Instant::now();
    assert_eq!(b.try_acquire(&k, &owner(T, "b"), "30s").await.unwrap(), None, "wait = 0 try");
    assert!(started.elapsed() < AT_ONCE, "the try answered after {:?}", started.elapsed());
    a.batch_execute("COMMIT").await.unwrap();
    assert!(b.holds(&k, fence).await.unwrap(), "the committed renew keeps the lease");
    assert_eq!(b.try_acquire(&k, &owner(T, "b"), "30s").await.unwrap(), None);
}

#[tokio::test]
async fn wait_on_a_key_acquired_in_an_open_transaction_goes_on_after_commit_until_release() {
    const T: &str = "wait_on_a_key_acquired_in_an_open_transaction_goes_on_after_commit_until_release";
    let cluster = Cluster::shared();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "a"));

    a.batch_execute("BEGIN").await.unwrap();
    let fence = a.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let waiter = b.spawn_acquire(&k, &owner(T, "b"), Some("30s"), Some("10s"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.batch_execute("COMMIT").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the committed grant holds the key: the wait goes on");

    let released_at = Instant::now();
    assert!(a.release(&k, &o).await.unwrap());
    let attempt = finish(waiter, LIMIT, "waiter after release").await;
    let granted = attempt.result.unwrap().expect("granted after the release");
    assert!(granted > fence);
    assert!(attempt.finished_at.duration_since(released_at) < GRANT_LAG);
}

/// `ROLLBACK TO SAVEPOINT` undoes the calls made since the savepoint and frees at once the keys
/// they touched (TTL and session-bound alike), while the transaction goes on; a key the
/// transaction touched *before* the savepoint stays busy until it ends.
#[tokio::test]
async fn a_savepoint_rolled_back_frees_the_keys_it_touched() {
    const T: &str = "a_savepoint_rolled_back_frees_the_keys_it_touched";
    let cluster = Cluster::shared();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (before, ttl_key, bound_key) = (key(T, "before"), key(T, "ttl"), key(T, "bound"));
    let (o, other) = (owner(T, "a"), owner(T, "b"));

    a.batch_execute("BEGIN").await.unwrap();
    let held = a.try_acquire(&before, &o, "30s").await.unwrap().expect("granted before the savepoint");
    a.batch_execute("SAVEPOINT s").await.unwrap();
    assert!(a.try_acquire(&ttl_key, &o, "30s").await.unwrap().is_some());
    assert!(a.acquire(&bound_key, &o, None, Some("0")).await.unwrap().is_some());
    // Touches `before` again: a second hold of its key lock, which the rollback gives back alone.
    assert!(a.renew(&before, &o, Some("60s")).await.unwrap().is_some());
    a.batch_execute("ROLLBACK TO SAVEPOINT s").await.unwrap();

    for k in [&ttl_key, &bound_key] {
        let started = Instant::now();
        let taken = b.try_acquire(k, &other, "30s").await.unwrap();
        assert!(taken.is_some(), "{k}: free for others right after ROLLBACK TO SAVEPOINT");
        assert!(started.elapsed() < AT_ONCE);
        assert!(b.release(k, &other).await.unwrap());
    }
    let started = Instant::now();
    assert_eq!(b.try_acquire(&before, &other, "30s").await.unwrap(), None, "touched before the savepoint");
    assert!(started.elapsed() < AT_ONCE);

    a.batch_execute("COMMIT").await.unwrap();
    let row = b.lease(&before).await.unwrap().expect("the grant before the savepoint committed");
    assert_eq!((row.owner.as_deref(), row.fence), (Some(o.as_str()), held));
    assert!(a.release(&before, &o).await.unwrap());
}
