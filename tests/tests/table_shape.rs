//! The direct path (grant, release and the sweep's page read straight on the heap) trusts the
//! lease table's shape only after checking it: a column added by hand, as a later release's
//! upgrade might add one, sends every statement back to SQL, which fills the column's default,
//! and the sweep then reads its pages through SQL too (its fallback, reached by no other test).

use std::time::Duration;

use dlock_tests::{Cluster, Session, key, owner, within};

async fn count(s: &Session, sql: &str, marker: &str) -> i64 {
    s.query_one(sql, &[&marker]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_column_added_by_hand_sends_grants_releases_and_sweeps_to_sql() {
    const T: &str = "table_shape";
    let cluster = Cluster::start_new("table-shape", &[]);
    let (superuser, s) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    // A lock cycle first, so that the session has looked the table up before the column comes.
    let first = s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(s.release(&k, &o).await.unwrap());

    superuser
        .batch_execute("ALTER TABLE dlock_internal.lease ADD COLUMN written_by text DEFAULT 'sql'")
        .await
        .unwrap();
    let fence = s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(fence > first);
    let written_by: Option<String> = superuser
        .query_one("SELECT written_by FROM dlock_internal.lease WHERE key = $1", &[&k])
        .await
        .unwrap()
        .get(0);
    assert_eq!(written_by.as_deref(), Some("sql"), "the grant went through SQL, which filled the default");
    assert!(s.release(&k, &o).await.unwrap());
    assert_eq!(s.lease(&k).await.unwrap(), None, "the release deleted the row");

    // Expired leases are swept by later grants, through SQL's page reads.
    let expired = key(T, "expired-");
    for i in 0..500 {
        s.try_acquire(&format!("{expired}{i:04}"), &o, "50ms").await.unwrap().expect("granted");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    const EXPIRED: &str = "SELECT count(*) FROM dlock_internal.lease WHERE strpos(key, $1) = 1";
    // (Grants of the later keys among them have swept some already.)
    assert!(count(&superuser, EXPIRED, &expired).await > 0, "expired rows wait to be swept");
    let fresh = key(T, "fresh-");
    within(Duration::from_secs(120), "the expired rows are swept", async {
        let mut i = 0;
        while count(&superuser, EXPIRED, &expired).await > 0 {
            for _ in 0..200 {
                let k = format!("{fresh}{i:06}");
                s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
                assert!(s.release(&k, &o).await.unwrap());
                i += 1;
            }
        }
    })
    .await;
    const WRITTEN_BY: &str = "SELECT count(*) FROM dlock_internal.lease WHERE written_by IS DISTINCT FROM $1";
    assert_eq!(count(&superuser, WRITTEN_BY, "sql").await, 0, "every row was written through SQL");
}
