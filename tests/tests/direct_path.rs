//! The lock cycle's two hot statements run directly on the lease table
//! (`extension/src/store/direct.rs`) only while the table is exactly as dlock created it: an
//! index added by a DBA sends them back to SQL, which keeps that index up to date too. Each
//! session looks the table up once and forgets it when it changes (an index added, the extension
//! dropped and created again).

use dlock_tests::{Cluster, Session, finish, key, owner, wait_for_waiters};
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

/// The direct path writes the primary key's entries itself: one for every insert, and one for
/// an update only when PostgreSQL could not keep the new version on its page. amcheck's
/// `heapallindexed` check finds a row missing from it, whatever mix of rows wrote it: key rows
/// taken, freed and taken again, session-bound and TTL leases, shared leases' owner rows.
#[tokio::test]
async fn the_primary_key_holds_every_row_the_direct_path_writes() {
    const T: &str = "the_primary_key_holds_every_row_the_direct_path_writes";
    let cluster = Cluster::start_new("direct-path-indexes", &[]);
    let s = cluster.connect().await;
    for round in 0..3 {
        for i in 0..40 {
            let (k, o) = (key(T, &format!("k{i}")), owner(T, &format!("o{i}-{round}")));
            let ttl = (i % 2 == 0).then_some("30s");
            s.acquire(&k, &o, ttl, Some("0")).await.unwrap().expect("granted");
            if i % 4 < 2 || round < 2 {
                assert!(s.release(&k, &o).await.unwrap());
            }
        }
    }
    let shared = key(T, "shared");
    for reader in 0..5 {
        let fence: Option<i64> = s
            .query_one(
                "SELECT dlock_acquire_shared($1, $2, '30s', '0')",
                &[&shared, &owner(T, &format!("reader{reader}"))],
            )
            .await
            .unwrap()
            .get(0);
        assert!(fence.is_some(), "a reader shares the key");
    }
    assert!(s.release(&shared, &owner(T, "reader2")).await.unwrap());
    s.batch_execute("CREATE EXTENSION amcheck").await.unwrap();
    // Raises an error naming the heap tuple that lacks its index entry.
    s.batch_execute("SELECT bt_index_check('dlock_internal.lease_pkey', true)").await.unwrap_or_else(|e| {
        panic!("lease_pkey: {}", e.as_db_error().map_or(e.to_string(), |d| d.message().to_string()))
    });
    let indexes: i64 = s
        .query_one("SELECT count(*) FROM pg_index WHERE indrelid = 'dlock_internal.lease'::regclass", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(indexes, 1, "the primary key is the table's one index");
}

/// The lock cycle on a key updates the key's row in place: a grant and a release are each a HOT
/// update (no index entry, the new version on the old one's page), not an insert and a delete.
#[tokio::test]
async fn the_lock_cycle_on_a_key_updates_its_row_in_place() {
    lock_cycles_update_in_place("direct-path-hot", &[], 0).await;
}

/// The same with the library preloaded, where neither half of the cycle scans the primary key
/// (each fetches the version its session wrote), among 2,000 other keys' rows: the fetches
/// prune the page as an index scan would, so the key row's page keeps room for its next version
/// (a sweep reads the key's page too seldom to).
#[tokio::test]
async fn the_lock_cycle_on_a_key_updates_its_row_in_place_when_preloaded() {
    lock_cycles_update_in_place("direct-path-hot-preloaded", &[PRELOAD], 2000).await;
}

/// 200 lock cycles of one key on a new cluster started with `conf`, after `others` other keys
/// were taken (for an hour, so that no sweep deletes their rows): each cycle two HOT updates.
async fn lock_cycles_update_in_place(name: &str, conf: &[&str], others: i64) {
    const T: &str = "the_lock_cycle_on_a_key_updates_its_row_in_place";
    let cluster = Cluster::start_new(name, conf);
    let (s, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    // Taken by the observer's backend: the sweeps they would owe are not the cycling session's.
    let taken: i64 = observer
        .query_one(
            "SELECT count(dlock_acquire($1 OPERATOR(pg_catalog.||) g::pg_catalog.text, $2, '1 hour')) \
               FROM pg_catalog.generate_series(1, $3::pg_catalog.int8) AS g",
            &[&key(T, "other"), &o, &others],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(taken, others);
    let counts = || async {
        observer.batch_execute("SELECT pg_stat_clear_snapshot()").await.unwrap();
        let row = observer
            .query_one(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables \
                  WHERE relid = 'dlock_internal.lease'::regclass",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2), row.get::<_, i64>(3))
    };
    const CYCLES: i64 = 200;
    for _ in 0..CYCLES {
        s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
        assert!(s.release(&k, &o).await.unwrap());
    }
    // The session's counts reach the shared statistics at its next idle moment.
    s.batch_execute("SELECT pg_stat_force_next_flush()").await.unwrap();
    s.batch_execute("SELECT 1").await.unwrap();
    let mut seen = counts().await;
    for _ in 0..50 {
        if seen.0 > others && seen.1 >= 2 * CYCLES - 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        seen = counts().await;
    }
    let (inserts, updates, hot, deletes) = seen;
    assert_eq!(inserts, 1 + others, "one row per key, inserted by its first grant");
    assert_eq!(updates, 2 * CYCLES - 1, "every other grant and every release updates it");
    assert_eq!(hot, updates, "each update HOT");
    assert_eq!(deletes, 0, "nothing deleted");
}

/// A release reads first the version of the key's row that its session's grant wrote, and uses
/// it only while it is the key's current row: not once another session changed the key, not
/// once the row is gone and its place holds another key's row, not in a table made again.
#[tokio::test]
async fn a_release_trusts_the_row_its_session_wrote_only_while_it_stands() {
    const T: &str = "a_release_trusts_the_row_its_session_wrote_only_while_it_stands";
    let cluster = Cluster::start_new("direct-path-last-row", &[]);
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let o = owner(T, "o");
    let ctid = |k: String| {
        let b = &b;
        async move {
            let row = b
                .query_one(
                    "SELECT ctid::text FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1",
                    &[&k],
                )
                .await
                .unwrap();
            row.get::<_, String>(0)
        }
    };

    // Another session released the lease and granted the key to another owner.
    let k = key(T, "changed");
    a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(b.release(&k, &o).await.unwrap());
    let other = owner(T, "other");
    let fence = b.try_acquire(&k, &other, "30s").await.unwrap().expect("granted to the other owner");
    assert!(!a.release(&k, &o).await.unwrap(), "the lease was released already");
    assert!(b.holds(&k, fence).await.unwrap(), "the other owner's lease stands");

    // The row went, and its place on the page holds another key's row of the same owner.
    let (gone, taker) = (key(T, "gone"), key(T, "taker"));
    // Dead versions cleared first: the page's lowest free place is then the one `gone` takes,
    // and again once it is gone.
    b.batch_execute("VACUUM dlock_internal.lease").await.unwrap();
    a.try_acquire(&gone, &o, "30s").await.unwrap().expect("granted");
    let place = ctid(gone.clone()).await;
    b.execute("DELETE FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1", &[&gone])
        .await
        .unwrap();
    b.batch_execute("VACUUM dlock_internal.lease").await.unwrap();
    let fence = b.try_acquire(&taker, &o, "30s").await.unwrap().expect("granted");
    assert_eq!(ctid(taker.clone()).await, place, "the new row took the freed place");
    assert!(!a.release(&gone, &o).await.unwrap(), "no lease of that key any more");
    assert!(b.holds(&taker, fence).await.unwrap(), "the other key's lease stands");
    assert!(a.release(&taker, &o).await.unwrap(), "released by its owner");

    // The table made again, smaller than the place the session remembers.
    let k = key(T, "recreated");
    a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    b.batch_execute("DROP EXTENSION dlock; CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    assert!(!a.release(&k, &o).await.unwrap(), "nothing to release in the new table");
    a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted in the new table");
    assert!(a.release(&k, &o).await.unwrap());
}

const PRELOAD: &str = "shared_preload_libraries = 'dlock'";

/// `try_acquire(key, owner)` in a transaction of its own, and how many scans of the lease
/// table's primary key it made (this transaction's pending statistics, which PostgreSQL sends
/// on only between transactions).
async fn try_acquire_counting_scans(s: &Session, key: &str, owner: &str) -> (i64, Option<i64>) {
    const SCANS: &str =
        "SELECT pg_catalog.pg_stat_get_xact_numscans('dlock_internal.lease_pkey'::pg_catalog.regclass)";
    s.batch_execute("BEGIN").await.unwrap();
    let before: i64 = s.query_one(SCANS, &[]).await.unwrap().get(0);
    let fence = s.try_acquire(key, owner, "30s").await.unwrap();
    let after: i64 = s.query_one(SCANS, &[]).await.unwrap().get(0);
    s.batch_execute("COMMIT").await.unwrap();
    (after - before, fence)
}

/// Where the key row of `key` is.
async fn key_row_ctid(s: &Session, key: &str) -> String {
    s.query_one(
        "SELECT ctid::text FROM dlock_internal.lease \
         WHERE key OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) ''",
        &[&key],
    )
    .await
    .unwrap()
    .get(0)
}

/// With the library preloaded, a grant of a key whose key row its session wrote last reads that
/// row alone (no index scan) while no owner row of the key can have been inserted since the
/// session last saw none. A reader's row, inserted beside the free key row, is counted, and the
/// next grant reads every row again and finds the key held.
#[tokio::test]
async fn a_grant_reads_the_key_row_alone_only_while_no_owner_row_can_have_come() {
    const T: &str = "a_grant_reads_the_key_row_alone_only_while_no_owner_row_can_have_come";
    let cluster = Cluster::start_new("direct-path-alone", &[PRELOAD]);
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (k, o, reader) = (key(T, "k"), owner(T, "o"), owner(T, "reader"));

    a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(a.release(&k, &o).await.unwrap());
    let (scans, fence) = try_acquire_counting_scans(&a, &k, &o).await;
    assert!(fence.is_some(), "granted again");
    assert_eq!(scans, 0, "the grant read the key row its session wrote, not the primary key");
    assert!(a.release(&k, &o).await.unwrap());

    // A reader's lease goes into an owner row; the key row stays as the session wrote it.
    let shared: Option<i64> =
        b.query_one("SELECT dlock_acquire_shared($1, $2, '30s', '0')", &[&k, &reader]).await.unwrap().get(0);
    assert!(shared.is_some(), "the reader shares the free key");
    let (scans, fence) = try_acquire_counting_scans(&a, &k, &o).await;
    assert_eq!(fence, None, "the reader holds the key");
    assert!(scans > 0, "the key's rows were read");
    assert!(b.release(&k, &reader).await.unwrap());

    // Once the reader is gone, a scan finds the key row alone again, and the next pair reads
    // only it.
    a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted after the reader left");
    assert!(a.release(&k, &o).await.unwrap());
    let (scans, fence) = try_acquire_counting_scans(&a, &k, &o).await;
    assert!(fence.is_some());
    assert_eq!(scans, 0);
    assert!(a.release(&k, &o).await.unwrap());
}

/// A release that hands its key to a waiting session writes the waiter's lease into an owner
/// row, beside the key row the releasing session itself just marked free: that row is counted,
/// so the releasing session's next grant reads the key's rows and finds the waiter holding it.
#[tokio::test]
async fn a_hand_off_to_a_waiter_is_seen_by_the_next_grant_of_the_session_that_released() {
    const T: &str = "a_hand_off_to_a_waiter_is_seen_by_the_next_grant_of_the_session_that_released";
    let cluster = Cluster::start_new("direct-path-hand-off", &[PRELOAD]);
    let (a, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o, waiter) = (key(T, "k"), owner(T, "o"), owner(T, "waiter"));
    // The session's grant scans the key and notes that it found no owner row.
    a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    let waiting = cluster.connect().await.spawn_acquire(&k, &waiter, Some("30s"), Some("10s"));
    wait_for_waiters(&observer, &k, 1).await;
    assert!(a.release(&k, &o).await.unwrap(), "released, and handed to the waiter");
    let handed = finish(waiting, std::time::Duration::from_secs(10), "the waiter's acquire").await;
    let fence = handed.result.unwrap().expect("the waiter was granted the key");

    let (scans, granted) = try_acquire_counting_scans(&a, &k, &o).await;
    assert_eq!(granted, None, "the waiter holds the key");
    assert!(scans > 0, "the key's rows were read");
    assert!(observer.holds(&k, fence).await.unwrap(), "the waiter's lease stands");
}

/// A session's note of where it wrote a key row is of one table: in a table made again, rows
/// that reached it other than through dlock's functions (a data-only restore of the old
/// table's rows) are read, even where the key row took the exact place the note names.
#[tokio::test]
async fn a_grant_reads_every_row_of_a_table_made_again() {
    const T: &str = "a_grant_reads_every_row_of_a_table_made_again";
    let cluster = Cluster::start_new("direct-path-remade", &[PRELOAD]);
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    a.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(a.release(&k, &o).await.unwrap());
    let place = key_row_ctid(&b, &k).await;
    let offset: i32 =
        place.trim_matches(|c| c == '(' || c == ')').split(',').nth(1).unwrap().parse().unwrap();
    assert!(place.starts_with("(0,"), "the key row is on the first page: {place}");

    b.execute(
        "CREATE TABLE public.saved AS SELECT * FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1",
        &[&k],
    )
    .await
    .unwrap();
    b.batch_execute("DROP EXTENSION dlock; CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    // The restore: free rows of other keys first, so that the key row lands where the note says,
    // then the key row, then a live lease of another owner in an owner row.
    const COLUMNS: &str = "owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, kind, max_holders, lock_delay, info, holder";
    for pad in 1..offset {
        b.execute(
            &format!(
                "INSERT INTO dlock_internal.lease (key, {COLUMNS}) \
                 SELECT $1, {COLUMNS} FROM public.saved"
            ),
            &[&key(T, &format!("pad{pad}"))],
        )
        .await
        .unwrap();
    }
    b.batch_execute(&format!(
        "INSERT INTO dlock_internal.lease (key, {COLUMNS}) SELECT key, {COLUMNS} FROM public.saved; \
         INSERT INTO dlock_internal.lease (key, {COLUMNS}) \
         SELECT key, 'restored', current_user::pg_catalog.regrole::pg_catalog.oid, fence OPERATOR(pg_catalog.+) 1, 1, \
           pg_catalog.now(), pg_catalog.now() OPERATOR(pg_catalog.+) '1 hour'::pg_catalog.interval, \
           pg_catalog.pg_backend_pid(), 'x', NULL, '0'::pg_catalog.interval, NULL, 'restored' \
         FROM public.saved"
    ))
    .await
    .unwrap();
    assert_eq!(key_row_ctid(&b, &k).await, place, "the key row is where the session's note says");

    assert_eq!(a.try_acquire(&k, &o, "30s").await.unwrap(), None, "the restored lease holds the key");
    let holder: String = b
        .query_one("SELECT owner FROM dlock_locks WHERE key OPERATOR(pg_catalog.=) $1", &[&k])
        .await
        .unwrap()
        .get(0);
    assert_eq!(holder, "restored");
}
