//! `DROP EXTENSION dlock` while leases are held and sessions wait for them: the drop does not
//! wait for the waits to run out — they end at once with a clear error (55000), their sessions
//! stay usable, no backend crashes — and the next `CREATE EXTENSION` starts clean.

use std::time::Duration;

use dlock_tests::{Cluster, SqlState, eventually, expect_sqlstate, finish, within};

async fn drop_ends_every_wait(conf: &[&str]) {
    let cluster = Cluster::start_new("drop", conf);
    let (holder, bound) = (cluster.connect().await, cluster.connect().await);
    holder.try_acquire("k", "a", "1 hour").await.unwrap().expect("granted");
    bound.acquire("k2", "b", None, Some("0")).await.unwrap().expect("granted");
    // Two waiters in line for the TTL lease (the first its queue's head), one for the
    // session-bound lease, without limit or with a long one.
    let w1 = cluster.connect().await.spawn_acquire("k", "w1", Some("1 hour"), None);
    let observer = cluster.connect().await;
    eventually(Duration::from_secs(5), "the head waits", || async {
        observer.waiters("k").await.unwrap() == 1
    })
    .await;
    let w2 = cluster.connect().await.spawn_acquire("k", "w2", Some("1 hour"), Some("1 hour"));
    let w3 = cluster.connect().await.spawn_acquire("k2", "w3", Some("1 hour"), None);
    eventually(Duration::from_secs(5), "everyone waits", || async {
        observer.waiters("k").await.unwrap() == 2 && observer.waiters("k2").await.unwrap() == 1
    })
    .await;

    let admin = cluster.connect().await;
    within(
        Duration::from_secs(15),
        "DROP EXTENSION beside the waits",
        admin.batch_execute("DROP EXTENSION dlock"),
    )
    .await
    .unwrap();
    for (name, waiter) in [("w1", w1), ("w2", w2), ("w3", w3)] {
        let attempt = finish(waiter, Duration::from_secs(10), name).await;
        let message =
            attempt.result.as_ref().err().and_then(|e| e.as_db_error()).map(|e| e.message().to_string());
        expect_sqlstate(attempt.result, &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, name);
        assert!(message.unwrap().contains("DROP EXTENSION dlock ended this wait"), "{name}");
        let alive: i32 = attempt.session.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(alive, 1, "{name}'s session is usable");
    }

    // Created again: clean, for everyone.
    admin.batch_execute("CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    let empty: i64 = admin.query_one("SELECT count(*) FROM dlock_locks", &[]).await.unwrap().get(0);
    assert_eq!(empty, 0, "no lease came back");
    let s = cluster.connect().await;
    assert!(s.try_acquire("k", "c", "1 hour").await.unwrap().is_some(), "the key is free");
    assert!(holder.try_acquire("k3", "a", "1 hour").await.unwrap().is_some(), "old sessions carry on");
}

#[tokio::test]
async fn drop_extension_ends_the_waits_and_create_starts_clean() {
    drop_ends_every_wait(&[]).await;
}

#[tokio::test]
async fn drop_extension_ends_the_waits_when_preloaded_too() {
    drop_ends_every_wait(&["shared_preload_libraries = 'dlock'"]).await;
}
