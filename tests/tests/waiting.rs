//! Server-side waiting: a waiter is granted when the key becomes free (release, expiry,
//! disconnect, termination, force release), gives up with NULL after `wait`, and leaves no
//! trace when cancelled.
//!
//! Timings are asserted loosely: a grant must come after the event and within 2 s of it.

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, NoTls, SqlState, expect_sqlstate, finish, key, owner, wait_for_waiters};

/// The most a grant may lag behind the event that freed the key (generous on purpose).
const GRANT_LAG: Duration = Duration::from_secs(2);
/// How long a test waits for a spawned waiter before failing instead of hanging.
const LIMIT: Duration = Duration::from_secs(15);

#[tokio::test]
async fn wait_is_granted_when_the_holder_releases() {
    const T: &str = "wait_is_granted_when_the_holder_releases";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let held = holder.try_acquire(&k, &owner(T, "holder"), "30s").await.unwrap().unwrap();

    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("10s"));
    wait_for_waiters(&observer, &k, 1).await;
    assert!(!waiter.is_finished(), "the waiter waits while the key is held");

    let released_at = Instant::now();
    assert!(holder.release(&k, &owner(T, "holder")).await.unwrap());
    let attempt = finish(waiter, LIMIT, "waiter after release").await;
    let granted = attempt.result.unwrap().expect("the waiter is granted after the release");
    assert!(granted > held, "fence {granted} after {held}");
    let lag = attempt.finished_at.duration_since(released_at);
    assert!(lag < GRANT_LAG, "granted {lag:?} after the release");

    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!(row.owner.as_deref(), Some(owner(T, "waiter").as_str()));
    assert_eq!((row.fence, row.hold_count, row.waiters), (granted, 1, 0));
    assert_eq!(row.holder_pid, Some(attempt.session.pid()));
}

#[tokio::test]
async fn wait_is_granted_when_the_lease_expires() {
    const T: &str = "wait_is_granted_when_the_lease_expires";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "300ms").await.unwrap().unwrap();
    let expires_at = holder.lease(&k).await.unwrap().unwrap().expires_at.unwrap();

    let started = Instant::now();
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("5s"));
    let attempt = finish(waiter, LIMIT, "waiter on an expiring lease").await;
    let granted = attempt.result.unwrap().expect("the waiter is granted after the expiry");
    assert!(granted > held, "fence {granted} after {held}");
    assert!(
        started.elapsed() < Duration::from_millis(300) + GRANT_LAG,
        "granted {:?} after the wait began (ttl 300 ms)",
        started.elapsed()
    );
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert!(
        row.acquired_at >= expires_at,
        "granted at {} (server clock), before the old lease expired at {expires_at}",
        row.acquired_at
    );
    assert_eq!(holder.renew(&k, &o, Some("30s")).await.unwrap(), None, "old owner renews");
    assert!(!holder.release(&k, &o).await.unwrap(), "old owner releases");
    assert!(observer.holds(&k, granted).await.unwrap());
}

#[tokio::test]
async fn wait_is_granted_when_a_session_bound_holder_disconnects() {
    const T: &str = "wait_is_granted_when_a_session_bound_holder_disconnects";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let held = holder.acquire(&k, &owner(T, "holder"), None, Some("0")).await.unwrap().unwrap();

    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("10s"));
    wait_for_waiters(&observer, &k, 1).await;
    assert!(!waiter.is_finished(), "the waiter waits while the holder is connected");

    let disconnected_at = Instant::now();
    drop(holder);
    let attempt = finish(waiter, LIMIT, "waiter after the holder disconnected").await;
    let granted = attempt.result.unwrap().expect("granted after the holder disconnected");
    assert!(granted > held, "fence {granted} after {held}");
    let lag = attempt.finished_at.duration_since(disconnected_at);
    assert!(lag < GRANT_LAG, "granted {lag:?} after the disconnect");
}

#[tokio::test]
async fn wait_is_granted_when_the_holder_backend_is_terminated() {
    const T: &str = "wait_is_granted_when_the_holder_backend_is_terminated";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let held = holder.acquire(&k, &owner(T, "holder"), None, Some("0")).await.unwrap().unwrap();

    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("10s"));
    wait_for_waiters(&observer, &k, 1).await;
    assert!(!waiter.is_finished());

    let terminated_at = Instant::now();
    let terminated: bool =
        observer.query_one("SELECT pg_terminate_backend($1)", &[&holder.pid()]).await.unwrap().get(0);
    assert!(terminated, "pg_terminate_backend({})", holder.pid());
    let attempt = finish(waiter, LIMIT, "waiter after pg_terminate_backend").await;
    let granted = attempt.result.unwrap().expect("granted after the holder was terminated");
    assert!(granted > held, "fence {granted} after {held}");
    let lag = attempt.finished_at.duration_since(terminated_at);
    assert!(lag < GRANT_LAG, "granted {lag:?} after the termination");
    assert!(holder.simple_query("SELECT 1").await.is_err(), "the holder's session is gone");
}

#[tokio::test]
async fn wait_is_granted_when_the_key_is_force_released() {
    const T: &str = "wait_is_granted_when_the_key_is_force_released";
    let cluster = Cluster::shared();
    let (holder, admin) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("10s"));
    wait_for_waiters(&admin, &k, 1).await;
    let forced_at = Instant::now();
    assert!(admin.force_release(&k).await.unwrap());
    let attempt = finish(waiter, LIMIT, "waiter after force release").await;
    let granted = attempt.result.unwrap().expect("granted after the force release");
    assert!(granted > held);
    assert!(attempt.finished_at.duration_since(forced_at) < GRANT_LAG);
    assert!(!holder.release(&k, &o).await.unwrap(), "the old owner no longer holds it");
}

#[tokio::test]
async fn release_grants_one_waiter_at_a_time() {
    const T: &str = "release_grants_one_waiter_at_a_time";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let held = holder.try_acquire(&k, &owner(T, "holder"), "30s").await.unwrap().unwrap();
    let mut first = cluster.connect().await.spawn_acquire(&k, &owner(T, "w1"), Some("30s"), Some("10s"));
    let mut second = cluster.connect().await.spawn_acquire(&k, &owner(T, "w2"), Some("30s"), Some("10s"));
    wait_for_waiters(&observer, &k, 2).await;

    assert!(holder.release(&k, &owner(T, "holder")).await.unwrap());
    // Whichever waiter wins, the other keeps waiting.
    let (winner, loser) = tokio::select! {
        a = &mut first => (a.unwrap(), second),
        b = &mut second => (b.unwrap(), first),
    };
    let granted = winner.result.unwrap().expect("one waiter is granted");
    assert!(granted > held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!loser.is_finished(), "the other waiter still waits");
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.fence, row.waiters), (granted, 1), "one grant, one waiter left");

    let winner_owner = row.owner.expect("superuser sees the owner");
    assert!(winner.session.release(&k, &winner_owner).await.unwrap());
    let last = finish(loser, LIMIT, "second waiter").await;
    let second_grant = last.result.unwrap().expect("the second waiter is granted next");
    assert!(second_grant > granted, "fence {second_grant} after {granted}");
}

/// Contract, release: "at 0 the key is free and a waiter is granted". A holder that releases
/// and tries again at once must find the key granted to the session that was waiting, or a
/// holder working in a loop starves its waiters (observed with polling waiters: a waiter got
/// NULL after 3 s while the holder released ~135 times, in 2 of 8 rounds). Several rounds, so
/// a race the waiter sometimes wins cannot pass by luck.
#[tokio::test]
async fn release_grants_a_waiter_before_the_releaser_can_take_the_key_back() {
    const T: &str = "release_grants_a_waiter_before_the_releaser_can_take_the_key_back";
    const ROUNDS: usize = 5;
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let mut waiting = cluster.connect().await;
    let (k, o, ow) = (key(T, "k"), owner(T, "holder"), owner(T, "waiter"));
    let mut retaken_in = Vec::new();
    for round in 0..ROUNDS {
        let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
        let waiter = waiting.spawn_acquire(&k, &ow, Some("30s"), Some("10s"));
        wait_for_waiters(&observer, &k, 1).await;

        let released_at = Instant::now();
        assert!(holder.release(&k, &o).await.unwrap());
        if holder.try_acquire(&k, &o, "30s").await.unwrap().is_some() {
            retaken_in.push(round);
            holder.release(&k, &o).await.unwrap(); // let the waiter through
        }
        let attempt = finish(waiter, LIMIT, "waiter").await;
        let granted = attempt.result.unwrap().expect("the waiter is granted");
        assert!(granted > held);
        assert!(attempt.finished_at.duration_since(released_at) < GRANT_LAG);
        waiting = attempt.session;
        assert!(waiting.release(&k, &ow).await.unwrap());
    }
    assert!(
        retaken_in.is_empty(),
        "the releaser took the key back although a session was waiting, in rounds {retaken_in:?} of {ROUNDS}"
    );
}

#[tokio::test]
async fn wait_times_out_with_null_after_the_wait() {
    const T: &str = "wait_times_out_with_null_after_the_wait";
    let cluster = Cluster::shared();
    let (holder, waiter) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    holder.try_acquire(&k, &owner(T, "holder"), "30s").await.unwrap().unwrap();
    let before = holder.lease(&k).await.unwrap().unwrap();

    let wait = Duration::from_millis(700);
    let started = Instant::now();
    let answer = waiter.acquire(&k, &owner(T, "waiter"), Some("30s"), Some("700ms")).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(answer, None, "a wait that elapses answers NULL");
    assert!(elapsed >= wait, "returned after {elapsed:?}, before the wait of {wait:?}");
    assert!(elapsed < wait + Duration::from_secs(1), "returned {elapsed:?} after a wait of {wait:?}");

    assert_eq!(holder.lease(&k).await.unwrap(), Some(before), "no waiter left, lease unchanged");
    waiter.query_one("SELECT 1", &[]).await.expect("the session is still usable");
}

#[tokio::test]
async fn cancelled_wait_fails_with_57014_and_leaves_no_waiter_behind() {
    const T: &str = "cancelled_wait_fails_with_57014_and_leaves_no_waiter_behind";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    holder.try_acquire(&k, &o, "60s").await.unwrap().unwrap();
    let before = observer.lease(&k).await.unwrap().unwrap();

    let waiting = cluster.connect().await;
    let cancel = waiting.cancel_token();
    // wait NULL: without limit, until cancelled.
    let waiter = waiting.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), None);
    wait_for_waiters(&observer, &k, 1).await;
    cancel.cancel_query(NoTls).await.unwrap();
    let attempt = finish(waiter, LIMIT, "cancelled waiter").await;
    expect_sqlstate(attempt.result, &SqlState::QUERY_CANCELED, "cancelled wait");

    // The session is usable; once it answers, its cancelled call is fully cleaned up.
    let waiting = attempt.session;
    waiting.query_one("SELECT 1", &[]).await.expect("the session is still usable");
    assert_eq!(observer.waiters(&k).await.unwrap(), 0, "the cancelled waiter left no trace");
    assert_eq!(observer.lease(&k).await.unwrap(), Some(before), "the lease is unchanged");
    let other_key = key(T, "other");
    assert!(waiting.try_acquire(&other_key, &owner(T, "waiter"), "10s").await.unwrap().is_some());
    assert!(waiting.release(&other_key, &owner(T, "waiter")).await.unwrap());

    // When the holder releases, the cancelled waiter does not get the key behind our back.
    assert!(holder.release(&k, &o).await.unwrap());
    assert_eq!(observer.lease(&k).await.unwrap(), None, "the key is free");
    assert!(observer.try_acquire(&k, &owner(T, "third"), "10s").await.unwrap().is_some());
}

#[tokio::test]
async fn statement_timeout_ends_a_wait_with_57014_and_leaves_no_waiter_behind() {
    const T: &str = "statement_timeout_ends_a_wait_with_57014_and_leaves_no_waiter_behind";
    let cluster = Cluster::shared();
    let (holder, observer, waiter) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    holder.try_acquire(&k, &o, "60s").await.unwrap().unwrap();
    let before = observer.lease(&k).await.unwrap().unwrap();

    waiter.batch_execute("SET statement_timeout = '300ms'").await.unwrap();
    for wait in [None, Some("10s")] {
        let started = Instant::now();
        let result = waiter.acquire(&k, &owner(T, "waiter"), Some("30s"), wait).await;
        let elapsed = started.elapsed();
        expect_sqlstate(result, &SqlState::QUERY_CANCELED, &format!("statement_timeout, wait {wait:?}"));
        assert!(elapsed >= Duration::from_millis(300), "wait {wait:?} ended after {elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "wait {wait:?} ended after {elapsed:?}");
        waiter.query_one("SELECT 1", &[]).await.expect("the session is still usable");
        assert_eq!(observer.waiters(&k).await.unwrap(), 0, "no waiter left (wait {wait:?})");
        assert_eq!(observer.lease(&k).await.unwrap(), Some(before.clone()), "lease unchanged");
    }
    waiter.batch_execute("RESET statement_timeout").await.unwrap();

    assert!(holder.release(&k, &o).await.unwrap());
    assert_eq!(observer.lease(&k).await.unwrap(), None, "the key is free");
    assert!(waiter.try_acquire(&k, &owner(T, "waiter"), "10s").await.unwrap().is_some());
}
