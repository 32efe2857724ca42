//! The lock cycle's two hot statements run directly on the lease table (`extension/src/heap.rs`)
//! only while the table is exactly as dlock created it: an index added by a DBA sends them back
//! to SQL, which keeps that index up to date too. Each session looks the table up once and
//! forgets it when it changes (an index added, the extension dropped and created again).

use dlock_tests::{Cluster, key, owner};

#[tokio::test]
async fn an_index_added_to_the_lease_table_is_kept_up_to_date() {
    const T: &str = "an_index_added_to_the_lease_table_is_kept_up_to_date";
    let cluster = Cluster::start_new("direct-path", &[]);
    let s = cluster.connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    // A lock cycle first, so that the session has looked the table up before the index comes.
    s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(s.release(&k, &o).await.unwrap());
    s.batch_execute("CREATE INDEX lease_by_owner ON dlock_internal.lease (owner)").await.unwrap();
    // Found through the added index only: a grant that bypassed it would be missing here.
    let by_index = |owner: String| {
        let s = &s;
        async move {
            s.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").await.unwrap();
            let plan: String = s
                .query("EXPLAIN SELECT key FROM dlock_internal.lease WHERE owner = $1", &[&owner])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect();
            assert!(plan.contains("lease_by_owner"), "the query uses the added index: {plan}");
            let n: i64 = s
                .query_one("SELECT count(*) FROM dlock_internal.lease WHERE owner = $1", &[&owner])
                .await
                .unwrap()
                .get(0);
            s.batch_execute("RESET enable_seqscan; RESET enable_bitmapscan").await.unwrap();
            n
        }
    };
    let fence = s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert_eq!(by_index(o.clone()).await, 1, "the grant is in the added index");
    assert!(s.release(&k, &o).await.unwrap());
    assert_eq!(by_index(o.clone()).await, 0, "the release removed the row");
    let next = s.try_acquire(&k, &owner(T, "next"), "30s").await.unwrap().expect("granted again");
    assert!(next > fence);
    assert_eq!(by_index(owner(T, "next")).await, 1);
}

#[tokio::test]
async fn a_session_follows_the_extension_dropped_and_created_again() {
    const T: &str = "a_session_follows_the_extension_dropped_and_created_again";
    let cluster = Cluster::start_new("direct-path-recreated", &[]);
    let (s, admin) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(s.release(&k, &o).await.unwrap());
    let old: u32 = admin.query_one("SELECT 'dlock_internal.lease'::regclass::oid", &[]).await.unwrap().get(0);

    admin.batch_execute("DROP EXTENSION dlock; CREATE EXTENSION dlock").await.unwrap();
    let new: u32 = admin.query_one("SELECT 'dlock_internal.lease'::regclass::oid", &[]).await.unwrap().get(0);
    assert_ne!(old, new, "a new lease table");
    let fence = s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted on the new table");
    let row = admin.lease(&k).await.unwrap().expect("the grant is in the new table");
    assert_eq!((row.owner.as_deref(), row.fence), (Some(o.as_str()), fence));
    assert!(s.release(&k, &o).await.unwrap());
    assert_eq!(admin.lease(&k).await.unwrap(), None, "released from the new table");
}
