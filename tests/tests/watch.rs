//! Watches and one-shot tries (`dlock_watch`, `dlock_unwatch`, `dlock_try_acquire`): how one
//! connection waits for many keys. A freed key notifies its watchers — after the commit, never
//! on rollback (of the transaction or of a savepoint), never for keys nobody watches — whatever
//! freed it: release, release_all, force release, a shortening renew, or the end of a
//! session-bound holder's session.

use std::time::Duration;

use dlock_tests::{Cluster, SqlState, expect_sqlstate, key, owner, wait_for_watchers};

/// Long enough for a notification that is coming to arrive (they take about a millisecond).
const QUIET: Duration = Duration::from_millis(300);
/// How long a test waits for a notification that must come before failing.
const LIMIT: Duration = Duration::from_secs(5);

/// `dlock_try_acquire`'s answer: fence, and retry_after in seconds.
async fn try_acquire(
    session: &tokio_postgres::Client,
    key: &str,
    owner: &str,
    ttl: Option<&str>,
    settle: Option<&str>,
) -> Result<(Option<i64>, Option<f64>), tokio_postgres::Error> {
    let row = session
        .query_one(
            "SELECT fence, extract(epoch FROM retry_after)::float8 \
               FROM dlock_try_acquire($1, $2, $3::text::interval, $4::text::interval)",
            &[&key, &owner, &ttl, &settle],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// A `dlock_try_acquire` (ttl 30 s) on a session of its own, in a task: its answer.
async fn spawn_try(
    cluster: &Cluster,
    key: &str,
    owner: String,
    settle: Option<&'static str>,
) -> tokio::task::JoinHandle<(Option<i64>, Option<f64>)> {
    let (key, session) = (key.to_owned(), cluster.connect().await);
    tokio::spawn(async move { try_acquire(&session, &key, &owner, Some("30s"), settle).await.unwrap() })
}

#[tokio::test]
async fn a_release_notifies_watchers_after_commit_and_a_rollback_does_not() {
    const T: &str = "watch_release";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let mut listener = cluster.listen().await;
    let (k, other) = (key(T, "k"), key(T, "unwatched"));
    let channel = listener.watch(&k).await.unwrap();
    assert_eq!(listener.watch(&k).await.unwrap(), channel, "watching twice is the same watch");
    wait_for_watchers(&observer, &k, 1).await;
    holder.try_acquire(&k, &owner(T, "h"), "30s").await.unwrap().unwrap();
    holder.try_acquire(&other, &owner(T, "h"), "30s").await.unwrap().unwrap();
    // Listen on the unwatched key's channel without watching it: nothing must come.
    let other_channel: String = observer.query_one("SELECT dlock_watch($1)", &[&other]).await.unwrap().get(0);
    observer.execute("SELECT dlock_unwatch($1)", &[&other]).await.unwrap();
    listener.batch_execute(&format!("LISTEN {other_channel}")).await.unwrap();

    // Released inside a transaction: nothing until COMMIT; a ROLLBACK sends nothing.
    holder.batch_execute("BEGIN").await.unwrap();
    assert!(holder.release(&k, &owner(T, "h")).await.unwrap());
    assert_eq!(listener.next(QUIET).await, None, "no notification before the commit");
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(listener.next(QUIET).await, None, "a rolled-back release notifies no one");
    // Released in a savepoint that rolls back, in a transaction that commits: nothing either.
    holder.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
    assert!(holder.release(&k, &owner(T, "h")).await.unwrap());
    holder.batch_execute("ROLLBACK TO SAVEPOINT s; COMMIT").await.unwrap();
    assert_eq!(listener.next(QUIET).await, None, "a release rolled back to a savepoint notifies no one");

    assert!(holder.release(&other, &owner(T, "h")).await.unwrap());
    assert_eq!(listener.next(QUIET).await, None, "keys nobody watches send nothing");

    holder.batch_execute("BEGIN").await.unwrap();
    assert!(holder.release(&k, &owner(T, "h")).await.unwrap());
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(listener.next(LIMIT).await, Some(channel.clone()), "the committed release notifies");
    let (fence, _) = try_acquire(&listener, &k, &owner(T, "w"), Some("30s"), Some("0")).await.unwrap();
    assert!(fence.is_some(), "the notified key is free");

    // A release that only gives back one of two holds frees nothing and tells no one.
    let o = owner(T, "w");
    holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    assert!(holder.release(&k, &o).await.unwrap());
    assert_eq!(listener.next(QUIET).await, None, "still held once: no notification");

    // Unwatched: no more notifications, even to a session that still LISTENs on the channel.
    assert!(listener.unwatch(&k).await.unwrap());
    listener.batch_execute(&format!("LISTEN {channel}")).await.unwrap();
    assert!(!listener.unwatch(&k).await.unwrap(), "a second unwatch finds no watch");
    wait_for_watchers(&observer, &k, 0).await;
    assert!(holder.release(&k, &o).await.unwrap());
    assert_eq!(listener.next(QUIET).await, None, "an unwatched key sends nothing");
}

#[tokio::test]
async fn release_all_force_release_and_a_shortening_renew_notify() {
    const T: &str = "watch_other_frees";
    let cluster = Cluster::shared();
    let holder = cluster.connect().await;
    let mut listener = cluster.listen().await;
    let (k1, k2, k3) = (key(T, "k1"), key(T, "k2"), key(T, "k3"));
    let mut channels = Vec::new();
    for k in [&k1, &k2, &k3] {
        channels.push(listener.watch(k).await.unwrap());
        holder.try_acquire(k, &owner(T, "h"), "60s").await.unwrap().unwrap();
    }

    // A longer renew frees nothing; a shorter one moves the expiry watchers sleep until.
    holder.renew(&k1, &owner(T, "h"), Some("120s")).await.unwrap().unwrap();
    assert_eq!(listener.next(QUIET).await, None, "a lengthening renew sends nothing");
    holder.renew(&k1, &owner(T, "h"), Some("1s")).await.unwrap().unwrap();
    assert_eq!(listener.next(LIMIT).await.as_ref(), Some(&channels[0]), "a shortening renew notifies");

    assert!(cluster.connect().await.force_release(&k2).await.unwrap());
    assert_eq!(listener.next(LIMIT).await.as_ref(), Some(&channels[1]), "a force release notifies");

    assert_eq!(holder.release_all(&owner(T, "h")).await.unwrap(), 2);
    let mut got = listener.drain(QUIET).await;
    got.sort();
    let mut want = vec![channels[0].clone(), channels[2].clone()];
    want.sort();
    assert_eq!(got, want, "release_all notifies each freed, watched key once");
}

#[tokio::test]
async fn a_session_bound_holder_ending_notifies_and_frees_at_once() {
    const T: &str = "watch_session_end";
    let cluster = Cluster::shared();
    let mut listener = cluster.listen().await;
    let k = key(T, "k");
    let channel = listener.watch(&k).await.unwrap();

    // Disconnect.
    let holder = cluster.connect().await;
    holder.acquire(&k, &owner(T, "h"), None, Some("0")).await.unwrap().unwrap();
    let (fence, retry) = try_acquire(&listener, &k, &owner(T, "w"), Some("30s"), Some("0")).await.unwrap();
    assert_eq!((fence, retry), (None, None), "a session-bound holder: only a notification will tell");
    drop(holder);
    assert_eq!(listener.next(LIMIT).await, Some(channel.clone()), "the holder's disconnect notifies");
    let (fence, _) = try_acquire(&listener, &k, &owner(T, "w"), Some("30s"), Some("0")).await.unwrap();
    let fence = fence.expect("the key is free once notified");
    assert!(
        listener
            .query_one("SELECT dlock_release($1, $2)", &[&k, &owner(T, "w")])
            .await
            .unwrap()
            .get::<_, bool>(0)
    );
    assert_eq!(listener.next(LIMIT).await, Some(channel.clone()), "our own release notifies us too");

    // pg_terminate_backend, and the holder in the middle of a transaction.
    let holder = cluster.connect().await;
    let again = holder.acquire(&k, &owner(T, "h"), None, Some("0")).await.unwrap().unwrap();
    assert!(again > fence);
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let admin = cluster.connect().await;
    admin.execute("SELECT pg_terminate_backend($1)", &[&holder.pid()]).await.unwrap();
    assert_eq!(listener.next(LIMIT).await, Some(channel.clone()), "a terminated holder notifies");
    let (fence, _) = try_acquire(&listener, &k, &owner(T, "w2"), Some("30s"), Some("0")).await.unwrap();
    assert!(fence.is_some_and(|f| f > again), "the key is free once notified");
}

#[tokio::test]
async fn try_acquire_says_when_the_blocking_lease_expires_and_waits_only_for_a_change_in_flight() {
    const T: &str = "watch_try";
    let cluster = Cluster::shared();
    let (holder, s) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let held = holder.try_acquire(&k, &owner(T, "h"), "20s").await.unwrap().unwrap();

    let (fence, retry) = try_acquire(&s, &k, &owner(T, "w"), Some("30s"), Some("0")).await.unwrap();
    let retry = retry.expect("a TTL lease expires by itself");
    assert!(fence.is_none());
    assert!(retry > 18.0 && retry <= 20.0, "retry_after {retry} of a 20 s lease");
    // The holder's own try is a reentry.
    let (again, _) = try_acquire(&s, &k, &owner(T, "h"), Some("30s"), None).await.unwrap();
    assert_eq!(again, Some(held));

    // A transaction changing the key: settle '0' answers at once with retry_after 0, a settle
    // long enough waits for its commit and then takes the key.
    holder.batch_execute("BEGIN").await.unwrap();
    assert!(holder.release(&k, &owner(T, "h")).await.unwrap());
    assert!(holder.release(&k, &owner(T, "h")).await.unwrap());
    assert_eq!(
        try_acquire(&s, &k, &owner(T, "w"), Some("30s"), Some("0")).await.unwrap(),
        (None, Some(0.0)),
        "the key is locked by an open transaction"
    );
    let waiting = spawn_try(cluster, &k, owner(T, "w"), Some("10s")).await;
    tokio::time::sleep(QUIET).await;
    assert!(!waiting.is_finished(), "it waits for the open transaction");
    holder.batch_execute("COMMIT").await.unwrap();
    let (fence, retry) = waiting.await.unwrap();
    assert!(
        fence.is_some_and(|f| f > held) && retry.is_none(),
        "granted after the commit: {fence:?} {retry:?}"
    );

    // The default settle (NULL) has no limit: it waits for the transaction too, here one that
    // rolls its grant back, and then takes the key.
    let k2 = key(T, "k2");
    holder.batch_execute("BEGIN").await.unwrap();
    holder.try_acquire(&k2, &owner(T, "h"), "30s").await.unwrap().unwrap();
    let waiting = spawn_try(cluster, &k2, owner(T, "w"), None).await;
    tokio::time::sleep(QUIET).await;
    assert!(!waiting.is_finished(), "with no settle, it waits for the open transaction");
    holder.batch_execute("ROLLBACK").await.unwrap();
    let (fence, retry) = waiting.await.unwrap();
    assert!(fence.is_some() && retry.is_none(), "granted after the rollback: {fence:?} {retry:?}");
}

#[tokio::test]
async fn a_try_never_barges_past_the_servers_queue() {
    const T: &str = "watch_queue";
    let cluster = Cluster::shared();
    let (holder, s) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    holder.try_acquire(&k, &owner(T, "h"), "30s").await.unwrap().unwrap();
    let queued = cluster.connect().await.spawn_acquire(&k, &owner(T, "q"), Some("30s"), Some("10s"));
    dlock_tests::wait_for_waiters(&s, &k, 1).await;
    assert!(holder.release(&k, &owner(T, "h")).await.unwrap());
    let attempt = dlock_tests::finish(queued, LIMIT, "the queued waiter").await;
    assert!(attempt.result.unwrap().is_some(), "the server's queue is served first");
    let (fence, retry) = try_acquire(&s, &k, &owner(T, "w"), Some("30s"), Some("0")).await.unwrap();
    assert!(fence.is_none() && retry.is_some_and(|r| r > 25.0), "busy with the queued waiter's lease");
}

#[tokio::test]
async fn bad_arguments_are_refused() {
    let cluster = Cluster::shared();
    let s = cluster.connect().await;
    let long = "k".repeat(1025);
    for (sql, code, what) in [
        ("SELECT dlock_watch(NULL)", &SqlState::NULL_VALUE_NOT_ALLOWED, "watch NULL key"),
        ("SELECT dlock_watch('')", &SqlState::INVALID_PARAMETER_VALUE, "watch empty key"),
        ("SELECT dlock_unwatch(NULL)", &SqlState::NULL_VALUE_NOT_ALLOWED, "unwatch NULL key"),
        ("SELECT * FROM dlock_try_acquire('k', 'o', '-1s')", &SqlState::INVALID_PARAMETER_VALUE, "ttl < 0"),
        (
            "SELECT * FROM dlock_try_acquire('k', 'o', '1s', '-1s')",
            &SqlState::INVALID_PARAMETER_VALUE,
            "settle < 0",
        ),
        ("SELECT * FROM dlock_try_acquire('k', NULL, '1s')", &SqlState::NULL_VALUE_NOT_ALLOWED, "NULL owner"),
        ("SELECT * FROM dlock_try_acquire('k', '', '1s')", &SqlState::INVALID_PARAMETER_VALUE, "empty owner"),
    ] {
        expect_sqlstate(s.batch_execute(sql).await, code, what);
    }
    expect_sqlstate(
        s.query_one("SELECT dlock_watch($1)", &[&long]).await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "watch a key over 1024 bytes",
    );
    assert_eq!(s.watchers("watch_bad_k").await.unwrap(), 0, "a refused watch leaves nothing");
}
