//! The lock cycle's two hot statements run directly on the lease table
//! (`extension/src/store/direct.rs`) only while the table is exactly as dlock created it: an
//! index added by a DBA sends them back to SQL, which keeps that index up to date too. Each
//! session looks the table up once and forgets it when it changes (an index added, the extension
//! dropped and created again).

use dlock_tests::{Cluster, Session, key, owner};
use tokio_postgres::types::ToSql;

/// The plan PostgreSQL picks for `sql`, one line per plan node, concatenated.
async fn plan(s: &Session, sql: &str, params: &[&(dyn ToSql + Sync)]) -> String {
    s.query(&format!("EXPLAIN {sql}"), params).await.unwrap().iter().map(|r| r.get::<_, String>(0)).collect()
}

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
            let plan = plan(
                s,
                "SELECT key FROM dlock_internal.lease WHERE owner OPERATOR(pg_catalog.=) $1",
                &[&owner],
            )
            .await;
            assert!(plan.contains("lease_by_owner"), "the query uses the added index: {plan}");
            let n: i64 = s
                .query_one(
                    "SELECT count(*) FROM dlock_internal.lease WHERE owner OPERATOR(pg_catalog.=) $1",
                    &[&owner],
                )
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

    admin.batch_execute("DROP EXTENSION dlock; CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    let new: u32 = admin.query_one("SELECT 'dlock_internal.lease'::regclass::oid", &[]).await.unwrap().get(0);
    assert_ne!(old, new, "a new lease table");
    let fence = s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted on the new table");
    let row = admin.lease(&k).await.unwrap().expect("the grant is in the new table");
    assert_eq!((row.owner.as_deref(), row.fence), (Some(o.as_str()), fence));
    assert!(s.release(&k, &o).await.unwrap());
    assert_eq!(admin.lease(&k).await.unwrap(), None, "released from the new table");
}

/// The direct path opens the partial index of session-bound rows only to insert one of those
/// (a TTL row is outside its predicate; a release deletes the heap tuple only). Both indexes
/// must still hold every row: amcheck's `heapallindexed` check finds a row missing from either.
#[tokio::test]
async fn both_indexes_hold_every_row_the_direct_path_writes() {
    const T: &str = "both_indexes_hold_every_row_the_direct_path_writes";
    let cluster = Cluster::start_new("direct-path-indexes", &[]);
    let s = cluster.connect().await;
    let mut session_bound = Vec::new();
    for i in 0..40 {
        let (k, o) = (key(T, &format!("k{i}")), owner(T, &format!("o{i}")));
        let ttl = (i % 2 == 0).then_some("30s");
        s.acquire(&k, &o, ttl, Some("0")).await.unwrap().expect("granted");
        if i % 4 < 2 {
            assert!(s.release(&k, &o).await.unwrap());
        } else if ttl.is_none() {
            session_bound.push(k);
        }
    }
    s.batch_execute("CREATE EXTENSION amcheck").await.unwrap();
    for index in ["dlock_internal.lease_pkey", "dlock_internal.lease_session_bound"] {
        // Raises an error naming the heap tuple that lacks its index entry.
        s.batch_execute(&format!("SELECT bt_index_check('{index}', true)")).await.unwrap_or_else(|e| {
            panic!("{index}: {}", e.as_db_error().map_or(e.to_string(), |d| d.message().to_string()))
        });
    }
    // And a read through the partial index finds exactly the session-bound leases still held.
    s.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").await.unwrap();
    let plan = plan(
        &s,
        "SELECT key FROM dlock_internal.lease WHERE expires_at OPERATOR(pg_catalog.=) 'infinity'",
        &[],
    )
    .await;
    assert!(plan.contains("lease_session_bound"), "the query uses the partial index: {plan}");
    let keys: Vec<String> = s
        .query("SELECT key FROM dlock_internal.lease WHERE expires_at OPERATOR(pg_catalog.=) 'infinity' ORDER BY key", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    session_bound.sort();
    assert_eq!(keys, session_bound);
}
