//! `dlock.wait_slots` sizes the wait table of a preloading server. A head that gets a slot is
//! granted by whoever frees its key, in the releaser's transaction (the lease row's `xmin` is
//! the releaser's); a head that finds the table full is still granted, by itself once woken
//! (its own transaction writes the row). A slot goes back to the table when its wait ends.

use std::time::Duration;

use dlock_tests::{Cluster, Session, finish, key, owner, wait_for_waiters};

/// A preloading server with a wait table of one slot.
fn one_slot_cluster() -> &'static Cluster {
    Cluster::shared_named("waitslots", &["shared_preload_libraries = 'dlock'", "dlock.wait_slots = 1"])
}

/// Releases `key` in a transaction of its own; that transaction's id (as `xmin` shows it).
async fn release_in_own_transaction(session: &Session, key: &str, owner: &str) -> String {
    session.batch_execute("BEGIN").await.unwrap();
    let xid: String = session
        .query_one("SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text", &[])
        .await
        .unwrap()
        .get(0);
    let released: bool =
        session.query_one("SELECT dlock_release($1, $2)", &[&key, &owner]).await.unwrap().get(0);
    assert!(released, "release of {key:?}");
    session.batch_execute("COMMIT").await.unwrap();
    xid
}

/// The transaction that wrote the row holding `key`'s lease (the key's free row may be there
/// too).
async fn writer_of(observer: &Session, key: &str) -> String {
    observer
        .query_one("SELECT xmin::text FROM dlock_internal.lease WHERE key = $1 AND hold_count > 0", &[&key])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_full_wait_table_still_serves_every_head_and_a_freed_slot_is_reused() {
    const T: &str = "a_full_wait_table_still_serves_every_head_and_a_freed_slot_is_reused";
    let cluster = one_slot_cluster();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let shown: String = observer.query_one("SHOW dlock.wait_slots", &[]).await.unwrap().get(0);
    assert_eq!(shown, "1");
    let o = owner(T, "holder");
    let (k1, k2) = (key(T, "k1"), key(T, "k2"));
    for k in [&k1, &k2] {
        holder.try_acquire(k, &o, "30s").await.unwrap().expect("free key");
    }

    // The first head takes the only slot; the second finds the table full.
    let first = cluster.connect().await.spawn_acquire(&k1, &owner(T, "first"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k1, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = cluster.connect().await.spawn_acquire(&k2, &owner(T, "second"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k2, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let releaser = release_in_own_transaction(&holder, &k2, &o).await;
    let attempt = finish(second, Duration::from_secs(10), "head without a slot").await;
    assert!(attempt.result.unwrap().is_some(), "the head without a slot is granted");
    assert_ne!(writer_of(&observer, &k2).await, releaser, "it granted itself");

    let releaser = release_in_own_transaction(&holder, &k1, &o).await;
    let attempt = finish(first, Duration::from_secs(10), "head with the slot").await;
    assert!(attempt.result.unwrap().is_some(), "the head with the slot is granted");
    assert_eq!(writer_of(&observer, &k1).await, releaser, "the releaser granted it");

    // The slot went back: the next head on another key gets it.
    let k3 = key(T, "k3");
    holder.try_acquire(&k3, &o, "30s").await.unwrap().expect("free key");
    let third = cluster.connect().await.spawn_acquire(&k3, &owner(T, "third"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k3, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let releaser = release_in_own_transaction(&holder, &k3, &o).await;
    let attempt = finish(third, Duration::from_secs(10), "head after the slot was freed").await;
    assert!(attempt.result.unwrap().is_some());
    assert_eq!(writer_of(&observer, &k3).await, releaser, "the freed slot was used again");
}

#[tokio::test]
async fn wait_slots_is_a_server_start_setting() {
    let session = one_slot_cluster().connect().await;
    let refused = session.batch_execute("SET dlock.wait_slots = 5").await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::CANT_CHANGE_RUNTIME_PARAM));
}
