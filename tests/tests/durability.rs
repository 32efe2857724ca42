//! Crash durability: an acknowledged acquire or renew survives a crash (`pg_ctl stop -m
//! immediate`), fences keep growing across it, and session-bound leases end with it.
//! Each test crashes a cluster of its own.

use dlock_tests::{Cluster, key, owner};

#[tokio::test]
async fn ttl_lease_survives_a_crash_and_fences_keep_growing() {
    const T: &str = "ttl_lease_survives_a_crash_and_fences_keep_growing";
    let cluster = Cluster::start_new("durability-ttl", &[]);
    let s = cluster.connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));

    // Fences handed out before the crash, the last one to a lease that must survive it.
    let mut fences = Vec::new();
    for _ in 0..50 {
        fences.push(s.try_acquire(&k, &o, "10s").await.unwrap().unwrap());
        assert!(s.release(&k, &o).await.unwrap());
    }
    let fence = s.try_acquire(&k, &o, "1 hour").await.unwrap().unwrap();
    assert_eq!(s.try_acquire(&k, &o, "1 hour").await.unwrap(), Some(fence));
    fences.push(fence);
    let renewed = s.renew(&k, &o, Some("2 hours")).await.unwrap().unwrap();
    let before = s.lease(&k).await.unwrap().unwrap();
    let highest = *fences.iter().max().unwrap();

    cluster.stop("immediate");
    assert!(s.query_one("SELECT 1", &[]).await.is_err(), "the crash ended the session");
    cluster.start();

    let s = cluster.connect().await;
    let row = s.lease(&k).await.unwrap().expect("the lease survived the crash");
    assert_eq!(row.owner.as_deref(), Some(o.as_str()));
    assert_eq!((row.fence, row.hold_count), (fence, 2), "fence and holds survived");
    let expires_at = row.expires_at.unwrap();
    assert!((expires_at - renewed).abs() < 0.001, "the renew survived: {expires_at} vs {renewed}");
    assert!((row.acquired_at - before.acquired_at).abs() < 0.001);
    assert!(s.holds(&k, fence).await.unwrap(), "holds(key, fence) after the crash");
    assert_eq!(s.try_acquire(&k, &owner(T, "other"), "10s").await.unwrap(), None, "still held");

    assert!(s.release(&k, &o).await.unwrap());
    assert!(s.release(&k, &o).await.unwrap());
    let next = s.try_acquire(&k, &owner(T, "other"), "10s").await.unwrap().unwrap();
    assert!(next > highest, "fence {next} after the crash, {highest} before it");
}

#[tokio::test]
async fn session_bound_lease_ends_with_a_crash() {
    const T: &str = "session_bound_lease_ends_with_a_crash";
    let cluster = Cluster::start_new("durability-session", &[]);
    let s = cluster.connect().await;
    let (bound, timed) = (key(T, "session-bound"), key(T, "ttl"));
    let o = owner(T, "o");
    let bound_fence = s.acquire(&bound, &o, None, Some("0")).await.unwrap().unwrap();
    let timed_fence = s.try_acquire(&timed, &o, "1 hour").await.unwrap().unwrap();

    cluster.stop("immediate");
    cluster.start();

    let s = cluster.connect().await;
    assert_eq!(s.lease(&bound).await.unwrap(), None, "the session-bound lease ended with the crash");
    assert!(!s.holds(&bound, bound_fence).await.unwrap());
    let next = s.try_acquire(&bound, &owner(T, "other"), "10s").await.unwrap();
    assert!(next.is_some_and(|f| f > bound_fence), "next grant {next:?} after {bound_fence}");
    assert!(s.holds(&timed, timed_fence).await.unwrap(), "the TTL lease survived");
}
