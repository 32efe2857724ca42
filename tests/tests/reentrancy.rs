//! Reentrancy: the same owner acquiring a key it holds gets the same fence and one more hold;
//! after expiry the same owner gets a new grant.

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, assert_between, key, owner};

#[tokio::test]
async fn reacquire_by_the_same_owner_after_expiry_is_a_new_grant() {
    const T: &str = "reacquire_by_the_same_owner_after_expiry_is_a_new_grant";
    let s = Cluster::shared().connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let first = s.try_acquire(&k, &o, "200ms").await.unwrap().unwrap();
    s.try_acquire(&k, &o, "200ms").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;

    let second = s.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    assert!(second > first, "a grant after expiry has a new, larger fence");
    let row = s.lease(&k).await.unwrap().unwrap();
    assert_eq!(row.hold_count, 1, "the expired holds are gone");
    assert!(s.release(&k, &o).await.unwrap());
    assert_eq!(s.lease(&k).await.unwrap(), None);
}

#[tokio::test]
async fn reentrant_acquire_returns_the_same_fence_and_counts_holds() {
    const T: &str = "reentrant_acquire_returns_the_same_fence_and_counts_holds";
    let cluster = Cluster::shared();
    let (s, other) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = s.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let first_expiry = s.lease(&k).await.unwrap().unwrap().expires_at.unwrap();

    // The reentrant grant keeps the later expiry: greatest(old, now + ttl).
    let start = Instant::now();
    let again = s.acquire(&k, &o, Some("1s"), Some("5s")).await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(1), "a reentrant acquire never waits");
    assert_eq!(again, Some(fence), "same owner gets the same fence");
    let row = s.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.fence, row.hold_count), (fence, 2));
    assert_eq!(row.expires_at, Some(first_expiry), "expires_at = greatest(old, now + ttl)");

    assert!(s.release(&k, &o).await.unwrap(), "first release");
    let row = s.lease(&k).await.unwrap().expect("still held after one of two releases");
    assert_eq!((row.fence, row.hold_count), (fence, 1));
    assert!(s.holds(&k, fence).await.unwrap());
    assert_eq!(other.try_acquire(&k, &owner(T, "other"), "30s").await.unwrap(), None);

    assert!(s.release(&k, &o).await.unwrap(), "second release");
    assert_eq!(s.lease(&k).await.unwrap(), None, "free after the last release");
    assert!(!s.holds(&k, fence).await.unwrap());
    assert!(!s.release(&k, &o).await.unwrap(), "a third release answers false");
    let next = other.try_acquire(&k, &owner(T, "other"), "30s").await.unwrap();
    assert!(next.is_some_and(|f| f > fence), "next grant {next:?} after {fence}");
}

#[tokio::test]
async fn reentrant_acquire_extends_expiry_to_the_later_of_old_and_new() {
    const T: &str = "reentrant_acquire_extends_expiry_to_the_later_of_old_and_new";
    let s = Cluster::shared().connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = s.try_acquire(&k, &o, "5s").await.unwrap().unwrap();
    let before = s.server_now().await.unwrap();
    assert_eq!(s.try_acquire(&k, &o, "60s").await.unwrap(), Some(fence));
    let after = s.server_now().await.unwrap();
    let row = s.lease(&k).await.unwrap().unwrap();
    assert_between(row.expires_at.unwrap(), before + 60.0, after + 60.0, "expires_at");
    assert_eq!(row.hold_count, 2);
    assert_eq!(s.release_all(&o).await.unwrap(), 1);
}
