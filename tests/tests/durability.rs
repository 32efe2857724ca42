//! Crash durability: an acknowledged acquire or renew survives a crash (`pg_ctl stop -m
//! immediate`), fences keep growing across it, and session-bound leases end with it.
//! Each test crashes a cluster of its own.

use std::time::Duration;

use dlock_tests::{Cluster, NoTls, key, owner};

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

/// A transaction that only released commits without waiting for its WAL (a lost release only
/// lets the lease run to its TTL), and the session's own `synchronous_commit` is back for the
/// next one. With a synchronous standby that never connects, a commit that waits for it waits
/// forever: a release must not, the session's next grant must (and so must a transaction that
/// granted and released).
#[tokio::test]
async fn a_release_alone_commits_without_waiting_and_the_next_grant_waits_again() {
    const T: &str = "a_release_alone_commits_without_waiting_and_the_next_grant_waits_again";
    let cluster = Cluster::start_new("durability-release", &[]);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let granter = cluster.connect().await;
    granter.batch_execute("SET synchronous_commit = local").await.unwrap();
    // After the extension is created (its commit would wait too).
    granter.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'").await.unwrap();
    granter.batch_execute("SELECT pg_catalog.pg_reload_conf()").await.unwrap();
    let releaser = cluster.connect().await;
    let patience = Duration::from_secs(20);

    for round in 0..3 {
        assert!(granter.try_acquire(&k, &o, "1 hour").await.unwrap().is_some(), "round {round}");
        let released = tokio::time::timeout(patience, releaser.release(&k, &o)).await;
        assert!(released.expect("the release waited for the standby").unwrap(), "round {round}");
    }
    // In a transaction block too, and the setting reads the same inside and after it.
    granter.try_acquire(&k, &o, "1 hour").await.unwrap().unwrap();
    let block = async {
        releaser.batch_execute("BEGIN").await?;
        let inside: String = releaser.query_one("SHOW synchronous_commit", &[]).await?.get(0);
        let released: bool = releaser.query_one("SELECT dlock_release($1, $2)", &[&k, &o]).await?.get(0);
        releaser.batch_execute("COMMIT").await?;
        Ok::<_, dlock_tests::Error>((inside, released))
    };
    let (inside, released) = tokio::time::timeout(patience, block).await.expect("the block waited").unwrap();
    assert_eq!((inside.as_str(), released), ("on", true));
    let after: String = releaser.query_one("SHOW synchronous_commit", &[]).await.unwrap().get(0);
    assert_eq!(after, "on", "the session's own setting is back");

    // The session's next grant waits for the standby again.
    let cancel = releaser.cancel_token();
    let (k2, o2) = (key(T, "second"), owner(T, "o2"));
    let grant =
        tokio::spawn(async move { releaser.try_acquire(&k2, &o2, "1 hour").await.map(|f| (f, releaser)) });
    let (fence, releaser) = waits_for_the_standby(
        grant,
        cancel,
        "a grant after a release committed without waiting for the standby",
    )
    .await
    .expect("a cancelled wait for the standby still commits");
    assert!(fence.is_some());
    // So does a transaction that granted and released.
    granter.try_acquire(&k, &o, "1 hour").await.unwrap().unwrap();
    let cancel = releaser.cancel_token();
    let (k3, o3) = (key(T, "third"), owner(T, "o3"));
    let mixed = tokio::spawn(async move {
        releaser.batch_execute("BEGIN").await?;
        releaser.query_one("SELECT dlock_try_acquire($1, $2, '1 hour')", &[&k3, &o3]).await?;
        let released: bool = releaser.query_one("SELECT dlock_release($1, $2)", &[&k, &o]).await?.get(0);
        releaser.batch_execute("COMMIT").await.map(|()| released)
    });
    let released =
        waits_for_the_standby(mixed, cancel, "a transaction that also granted committed without waiting");
    assert!(released.await.unwrap(), "released in the mixed transaction");
}

/// Asserts that `task`, whose commit has no standby to wait for, is still waiting after 2 s
/// (else fails with `what`), then cancels the wait (the commit stays) and returns what it gave.
async fn waits_for_the_standby<T>(
    task: tokio::task::JoinHandle<T>,
    cancel: tokio_postgres::CancelToken,
    what: &str,
) -> T {
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!task.is_finished(), "{what}");
    cancel.cancel_query(NoTls).await.unwrap();
    task.await.unwrap()
}
