//! Shared leases take their key lock in share mode (readers do not wait for each other's
//! commits), yet the rules hold exactly: a shared grant still uncommitted keeps an exclusive
//! request waiting, an exclusive request waiting holds back later readers, one owner's calls on
//! one key from two sessions are still one lease (reentry, not two rows), and a reader's release
//! wakes a waiting writer.

use std::time::Duration;

use dlock_tests::{Cluster, Session, eventually, key, owner, within};

async fn shared(s: &Session, key: &str, owner: &str, wait: &str) -> Option<i64> {
    s.query_one("SELECT dlock_acquire_shared($1, $2, '1 hour', $3::text::interval)", &[&key, &owner, &wait])
        .await
        .unwrap()
        .get(0)
}

fn clusters() -> [&'static Cluster; 2] {
    [Cluster::shared(), Cluster::shared_named("preloaded", &["shared_preload_libraries = 'dlock'"])]
}

#[tokio::test]
async fn readers_grant_side_by_side_and_an_uncommitted_reader_still_holds_a_writer_back() {
    const T: &str = "side_by_side";
    for cluster in clusters() {
        let (r1, r2, w) = (cluster.connect().await, cluster.connect().await, cluster.connect().await);
        let k = key(T, "k");
        // Two readers in open transactions: neither waits for the other's commit.
        r1.batch_execute("BEGIN").await.unwrap();
        r2.batch_execute("BEGIN").await.unwrap();
        let f1 = shared(&r1, &k, &owner(T, "r1"), "0").await.expect("granted");
        let f2 = within(Duration::from_secs(5), "a second reader", shared(&r2, &k, &owner(T, "r2"), "0"))
            .await
            .expect("granted beside the first, before its commit");
        assert!(f2 > f1);
        // A writer cannot pass either of them, committed or not.
        assert_eq!(w.try_acquire(&k, &owner(T, "w"), "1 hour").await.unwrap(), None);
        r1.batch_execute("COMMIT").await.unwrap();
        r2.batch_execute("COMMIT").await.unwrap();
        assert_eq!(w.try_acquire(&k, &owner(T, "w"), "1 hour").await.unwrap(), None);
        for (s, o) in [(&r1, "r1"), (&r2, "r2")] {
            assert!(s.release(&k, &owner(T, o)).await.unwrap());
        }
        assert!(w.try_acquire(&k, &owner(T, "w"), "1 hour").await.unwrap().is_some());
        assert!(w.release(&k, &owner(T, "w")).await.unwrap());
    }
}

#[tokio::test]
async fn one_owner_from_two_sessions_is_one_lease() {
    const T: &str = "one_owner_two_sessions";
    for cluster in clusters() {
        let (a, b) = (cluster.connect().await, cluster.connect().await);
        let (k, o) = (key(T, "k"), owner(T, "o"));
        a.batch_execute("BEGIN").await.unwrap();
        let fence = shared(&a, &k, &o, "0").await.expect("granted");
        // The same owner from another session waits for the first call's transaction (its
        // holder lock), then reenters: one row, two holds, the same fence.
        let b_call = tokio::spawn(async move {
            let fence = shared(&b, &k.clone(), &o.clone(), "10 seconds").await;
            (fence, b)
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!b_call.is_finished(), "the second call waits for the first's transaction");
        a.batch_execute("COMMIT").await.unwrap();
        let (again, b) = within(Duration::from_secs(10), "the second call", b_call).await.unwrap();
        assert_eq!(again, Some(fence), "reentry: the same fence");
        let (k, o) = (key(T, "k"), owner(T, "o"));
        let holds: i32 =
            a.query_one("SELECT hold_count FROM dlock_locks WHERE key = $1", &[&k]).await.unwrap().get(0);
        assert_eq!(holds, 2);
        assert!(b.release(&k, &o).await.unwrap());
        assert!(a.release(&k, &o).await.unwrap());
        assert_eq!(a.lease(&k).await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_waiting_writer_holds_back_later_readers_and_the_last_release_wakes_it() {
    const T: &str = "writer_waits";
    for cluster in clusters() {
        let (r1, r2, observer) = (cluster.connect().await, cluster.connect().await, cluster.connect().await);
        let k = key(T, "k");
        shared(&r1, &k, &owner(T, "r1"), "0").await.expect("granted");
        shared(&r2, &k, &owner(T, "r2"), "0").await.expect("granted");
        let writer = cluster.connect().await;
        let (k1, wo) = (k.clone(), owner(T, "w"));
        let writing =
            tokio::spawn(async move { writer.acquire(&k1, &wo, Some("1 hour"), Some("30 seconds")).await });
        eventually(Duration::from_secs(10), "the writer waits", || async {
            observer.waiters(&k).await.unwrap() == 1
        })
        .await;
        // A later reader does not pass the waiting writer.
        let late = cluster.connect().await;
        assert_eq!(shared(&late, &k, &owner(T, "late"), "0").await, None, "held back by the writer");
        assert!(r1.release(&k, &owner(T, "r1")).await.unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!writing.is_finished(), "one reader left");
        assert!(r2.release(&k, &owner(T, "r2")).await.unwrap());
        let fence = within(Duration::from_secs(10), "the writer", writing).await.unwrap().unwrap();
        assert!(fence.is_some(), "granted once the last reader released");
        assert!(observer.release(&k, &owner(T, "w")).await.unwrap());
    }
}
