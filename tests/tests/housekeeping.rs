//! The lease table stays small: released leases leave no rows, and grants sweep expired rows as
//! they go (one grant in eight reads a random page of the table), with no background worker.

use std::time::Duration;

use dlock_tests::{Cluster, Session, key, owner, within};
use futures::{StreamExt, TryStreamExt, stream};

/// The tests of this binary count rows: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Calls in flight per session (pipelined; each still commits on its own).
const IN_FLIGHT: usize = 64;

/// Rows of `dlock_internal.lease` whose text form contains `marker` (as superuser; the test
/// does not depend on the table's column names).
async fn rows_containing(s: &Session, marker: &str) -> i64 {
    s.query_one("SELECT count(*) FROM dlock_internal.lease AS l WHERE strpos(l::text, $1) > 0", &[&marker])
        .await
        .expect("superuser reads dlock_internal.lease")
        .get(0)
}

/// Acquires keys `<marker>-<i>` for `range` from one session; with `release`, releases each
/// right after its acquire.
async fn acquire_keys(
    s: &Session,
    test: &str,
    marker: &str,
    range: std::ops::Range<usize>,
    ttl: &str,
    release: bool,
) {
    let o = owner(test, marker);
    stream::iter(range)
        .map(|i| {
            let (k, o) = (key(test, &format!("{marker}-{i:05}")), o.clone());
            async move {
                let fence = s.try_acquire(&k, &o, ttl).await?;
                assert!(fence.is_some(), "{k} is new and must be granted");
                if release {
                    assert!(s.release(&k, &o).await?, "{k} is released");
                }
                Ok::<_, dlock_tests::Error>(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await
        .expect("acquire / release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn released_leases_leave_no_rows() {
    const T: &str = "released_leases_leave_no_rows";
    const KEYS: usize = 20_000;
    const SESSIONS: usize = 4;
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(cluster.connect().await);
    }

    let per = KEYS / SESSIONS;
    let work = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| acquire_keys(s, T, "released", i * per..(i + 1) * per, "1 minute", true));
    within(Duration::from_secs(90), "20,000 acquire + release", futures::future::join_all(work)).await;

    assert_eq!(rows_containing(&superuser, &key(T, "released-")).await, 0, "released rows must be deleted");
}

#[tokio::test]
async fn expired_leases_are_swept_by_acquires_of_new_keys() {
    const T: &str = "expired_leases_are_swept_by_acquires_of_new_keys";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let (superuser, s) = (cluster.connect().await, cluster.connect().await);
    let expired_marker = key(T, "expired-");

    within(
        Duration::from_secs(60),
        "2,000 short leases",
        acquire_keys(&s, T, "expired", 0..2_000, "50ms", false),
    )
    .await;
    let written = rows_containing(&superuser, &expired_marker).await;
    assert!(written <= 2_000, "{written} rows for 2,000 keys");
    tokio::time::sleep(Duration::from_millis(300)).await; // all 2,000 have expired now

    // 3,000 new keys held, then batches of 1,000 acquire+release of new keys until the expired
    // rows are gone. One grant in eight sweeps a random page, so a given page is missed by n
    // grants with probability e^(-n / (8 · pages)): allowing 10 · 8 · pages grants leaves a
    // chance of about e^-10 per page of expired rows. A sweep that does not work never gets
    // there. (How big the table is depends on how much earlier tests' dead rows were pruned.)
    within(
        Duration::from_secs(60),
        "3,000 new keys",
        acquire_keys(&s, T, "fresh", 0..3_000, "1 minute", false),
    )
    .await;
    let pages = || async {
        let pages: i64 = superuser
            .query_one("SELECT pg_relation_size('dlock_internal.lease') / 8192", &[])
            .await
            .unwrap()
            .get(0);
        pages
    };
    let mut batches = 0;
    while rows_containing(&superuser, &expired_marker).await > 0 {
        batches += 1;
        let pages = pages().await;
        let allowed = 20.max(10 * 8 * pages as usize / 1_000 + 1);
        assert!(
            batches <= allowed,
            "expired rows still there after {} grants (table: {pages} pages)",
            3_000 + 1_000 * (batches - 1)
        );
        let range = batches * 1_000..(batches + 1) * 1_000;
        within(
            Duration::from_secs(60),
            "1,000 more keys",
            acquire_keys(&s, T, "churn", range, "1 minute", true),
        )
        .await;
    }
    eprintln!("expired rows gone after {batches} batches of 1,000 grants (table: {} pages)", pages().await);
    let fresh = rows_containing(&superuser, &key(T, "fresh-")).await;
    assert_eq!(fresh, 3_000, "the live leases are all there");
    let total: i64 =
        superuser.query_one("SELECT count(*) FROM dlock_internal.lease", &[]).await.unwrap().get(0);
    assert!(total < 3_000 + 100, "{total} rows in dlock_internal.lease with 3,000 live leases");

    assert_eq!(s.release_all(&owner(T, "fresh")).await.unwrap(), 3_000);
    assert_eq!(rows_containing(&superuser, &key(T, "fresh-")).await, 0);
}

/// A grant inside a transaction block sweeps nothing: a swept key would stay locked until the
/// block commits, so acquirers of an expired key would wait for somebody else's transaction.
/// On a cluster of its own, the table holds only this test's rows, so a sweep would surely hit
/// the expired ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_in_a_transaction_block_leave_expired_keys_free_for_others() {
    const T: &str = "grants_in_a_transaction_block_leave_expired_keys_free_for_others";
    let cluster = Cluster::shared_named("sweep-in-blocks", &[]);
    let (block, other) = (cluster.connect().await, cluster.connect().await);
    within(
        Duration::from_secs(60),
        "300 short leases",
        acquire_keys(&other, T, "expired", 0..300, "50ms", false),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await; // all 300 have expired now

    // 800 grants in one open transaction block: about 100 of them would each have swept a page.
    block.client().batch_execute("BEGIN").await.unwrap();
    within(
        Duration::from_secs(60),
        "800 grants in a block",
        acquire_keys(&block, T, "in-block", 0..800, "1 minute", false),
    )
    .await;

    // While the block is open, every expired key is free for another session at once.
    let o = owner(T, "other");
    for i in 0..300 {
        let k = key(T, &format!("expired-{i:05}"));
        let fence = other.try_acquire(&k, &o, "1 minute").await.unwrap();
        assert!(fence.is_some(), "{k} ran out and nobody else holds it: granted at once, not busy");
    }
    block.client().batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(other.release_all(&o).await.unwrap(), 300);
}
