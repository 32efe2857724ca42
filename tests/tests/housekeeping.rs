//! The lease table stays small with no background worker. A key's row outlives its lease, so
//! that the key's next grant writes over it in place; rows over for longer than
//! `dlock.sweep_after` are swept by grants as they go: one random page per row a grant's backend
//! added, one grant in eight otherwise (`extension/src/store/sweep.rs`).

use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, expect_sqlstate, key, owner, within};
use futures::{StreamExt, TryStreamExt, stream};

/// The tests of this binary count rows: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Calls in flight per session (pipelined; each still commits on its own).
const IN_FLIGHT: usize = 64;

/// (rows, free rows) of `dlock_internal.lease` whose key starts with `prefix`.
async fn rows_of(s: &Session, prefix: &str) -> (i64, i64) {
    let row = s
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE hold_count = 0 AND owner IS NULL) \
               FROM dlock_internal.lease WHERE starts_with(key, $1)",
            &[&prefix],
        )
        .await
        .expect("superuser reads dlock_internal.lease");
    (row.get(0), row.get(1))
}

async fn table_pages(s: &Session) -> i64 {
    s.query_one("SELECT pg_relation_size('dlock_internal.lease') / 8192", &[]).await.unwrap().get(0)
}

/// Acquires keys `<marker>-<i>` for `range` from one session for owner `who`; with `release`,
/// releases each right after its acquire. The fences granted, in key order.
async fn acquire_keys(
    s: &Session,
    test: &str,
    marker: &str,
    who: &str,
    range: std::ops::Range<usize>,
    ttl: &str,
    release: bool,
) -> Vec<i64> {
    let o = owner(test, who);
    stream::iter(range)
        .map(|i| {
            let (k, o) = (key(test, &format!("{marker}-{i:05}")), o.clone());
            async move {
                let fence = s
                    .try_acquire(&k, &o, ttl)
                    .await?
                    .unwrap_or_else(|| panic!("{k} is free and must be granted"));
                if release {
                    assert!(s.release(&k, &o).await?, "{k} is released");
                }
                Ok::<_, dlock_tests::Error>(fence)
            }
        })
        .buffered(IN_FLIGHT)
        .try_collect::<Vec<i64>>()
        .await
        .expect("acquire / release")
}

/// Acquires and releases batches of 1,000 new keys (`churn-<n>`) from `s` until no row of
/// `prefix` is left. A grant that adds a row sweeps a random page, so a given page is missed by
/// n such grants with probability (1 - 1/pages)^n ≈ e^(-n / pages): allowing 10 · pages grants
/// leaves a chance of about e^-10 per page. A sweep that does not work never gets there. The
/// batches run.
async fn churn_until_swept(s: &Session, superuser: &Session, test: &str, prefix: &str) -> usize {
    let mut batches = 0;
    while rows_of(superuser, prefix).await.0 > 0 {
        batches += 1;
        let pages = table_pages(superuser).await;
        let allowed = 20.max(10 * pages as usize / 1_000 + 1);
        assert!(
            batches <= allowed,
            "rows of {prefix} still there after {} grants of new keys (table: {pages} pages)",
            1_000 * (batches - 1)
        );
        let range = batches * 1_000..(batches + 1) * 1_000;
        within(
            Duration::from_secs(60),
            "1,000 more keys",
            acquire_keys(s, test, "churn", "churn", range, "1 minute", true),
        )
        .await;
    }
    batches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_released_key_keeps_a_free_row_that_its_next_grant_writes_over() {
    const T: &str = "a_released_key_keeps_a_free_row_that_its_next_grant_writes_over";
    const KEYS: usize = 2_000;
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let (superuser, s) = (cluster.connect().await, cluster.connect().await);
    // Longer than this test runs: no row of it is swept meanwhile.
    s.batch_execute("SET dlock.sweep_after = '10min'").await.unwrap();
    let prefix = key(T, "released-");

    let first = within(
        Duration::from_secs(60),
        "2,000 acquire + release",
        acquire_keys(&s, T, "released", "first", 0..KEYS, "1 minute", true),
    )
    .await;
    assert_eq!(rows_of(&superuser, &prefix).await, (KEYS as i64, KEYS as i64), "a free row per released key");

    let again = within(
        Duration::from_secs(60),
        "the same 2,000 again",
        acquire_keys(&s, T, "released", "second", 0..KEYS, "1 minute", false),
    )
    .await;
    assert_eq!(rows_of(&superuser, &prefix).await, (KEYS as i64, 0), "the same rows, each held again");
    for (i, (a, b)) in first.iter().zip(&again).enumerate() {
        assert!(b > a, "key {i}: the next grant's fence {b} must exceed the last one's {a}");
    }
    let held: i64 = superuser
        .query_one(
            "SELECT count(*) FROM dlock_locks WHERE starts_with(key, $1) AND owner = $2",
            &[&prefix, &owner(T, "second")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, KEYS as i64, "dlock_locks shows the leases, not the free rows");
    assert_eq!(s.release_all(&owner(T, "second")).await.unwrap(), KEYS as i32);
}

/// A churn of distinct keys: every key taken once and released. With `dlock.sweep_after = 0`
/// each row is due as soon as it is free, and the sweep keeps the table from growing with the
/// churn: due rows settle at about one per page, and every row of the first keys goes in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_churn_of_keys_leaves_about_a_row_per_page() {
    const T: &str = "a_churn_of_keys_leaves_about_a_row_per_page";
    const KEYS: usize = 20_000;
    const SESSIONS: usize = 4;
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let s = cluster.connect().await;
        s.batch_execute("SET dlock.sweep_after = 0").await.unwrap();
        sessions.push(s);
    }
    let prefix = key(T, "first-");

    let per = KEYS / SESSIONS;
    let owners: Vec<String> = (0..SESSIONS).map(|i| format!("o{i}")).collect();
    let work = sessions
        .iter()
        .zip(&owners)
        .enumerate()
        .map(|(i, (s, o))| acquire_keys(s, T, "first", o, i * per..(i + 1) * per, "1 minute", true));
    within(Duration::from_secs(120), "20,000 acquire + release", futures::future::join_all(work)).await;

    let (rows, free) = rows_of(&superuser, &prefix).await;
    let pages = table_pages(&superuser).await;
    assert_eq!(rows, free, "every row left is free");
    // About one due row per page, and the table holds rows of other tests too: twice as many
    // rows as pages would be a sweep that falls behind.
    assert!(rows <= 2 * pages + 100, "{rows} free rows of 20,000 keys left on {pages} pages");
    eprintln!("after 20,000 new keys: {rows} of their rows left on {pages} pages");

    let batches = churn_until_swept(&sessions[0], &superuser, T, &prefix).await;
    eprintln!("the rest swept after {batches} batches of 1,000 new keys");
}

#[tokio::test]
async fn expired_leases_are_swept_by_grants_of_new_keys() {
    const T: &str = "expired_leases_are_swept_by_grants_of_new_keys";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let (superuser, s) = (cluster.connect().await, cluster.connect().await);
    let prefix = key(T, "expired-");

    within(
        Duration::from_secs(60),
        "2,000 short leases",
        acquire_keys(&s, T, "expired", "short", 0..2_000, "50ms", false),
    )
    .await;
    assert_eq!(rows_of(&superuser, &prefix).await, (2_000, 0), "a row per lease, each held");
    tokio::time::sleep(Duration::from_millis(300)).await; // all 2,000 have expired now
    s.batch_execute("SET dlock.sweep_after = 0").await.unwrap();

    // 3,000 live leases of new keys, which the sweep must leave alone (an hour: the churn below
    // takes longer than a minute in the SQL edition).
    within(
        Duration::from_secs(60),
        "3,000 new keys",
        acquire_keys(&s, T, "live", "live", 0..3_000, "1 hour", false),
    )
    .await;
    let batches = churn_until_swept(&s, &superuser, T, &prefix).await;
    eprintln!(
        "expired rows gone after {batches} batches of 1,000 new keys (table: {} pages)",
        table_pages(&superuser).await
    );
    assert_eq!(rows_of(&superuser, &key(T, "live-")).await, (3_000, 0), "the live leases are all there");
    assert_eq!(s.release_all(&owner(T, "live")).await.unwrap(), 3_000);
}

/// Fences only grow per key, also when the key's row was swept in between.
#[tokio::test]
async fn a_key_whose_row_was_swept_is_granted_a_greater_fence() {
    const T: &str = "a_key_whose_row_was_swept_is_granted_a_greater_fence";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let (superuser, s) = (cluster.connect().await, cluster.connect().await);
    s.batch_execute("SET dlock.sweep_after = 0").await.unwrap();
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let first = s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted");
    assert!(s.release(&k, &o).await.unwrap());
    churn_until_swept(&s, &superuser, T, &k).await;
    let second = s.try_acquire(&k, &o, "30s").await.unwrap().expect("granted again");
    assert!(second > first, "fence {second} after the sweep, {first} before");
    assert!(s.release(&k, &o).await.unwrap());
}

/// How long rows stay is the DBA's call: a plain role may not change it.
#[tokio::test]
async fn only_a_superuser_sets_sweep_after() {
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    superuser.batch_execute("DROP ROLE IF EXISTS t_sweeper; CREATE ROLE t_sweeper LOGIN").await.unwrap();
    let plain = cluster.connect_as("t_sweeper").await;
    plain.holds("k", 1).await.unwrap(); // loads dlock, which defines the setting
    expect_sqlstate(
        plain.batch_execute("SET dlock.sweep_after = 0").await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "a plain role sets dlock.sweep_after",
    );
    let shown: String = plain.query_one("SHOW dlock.sweep_after", &[]).await.unwrap().get(0);
    assert_eq!(shown, "5s", "the default");
}

/// A grant inside a transaction block sweeps nothing: a swept row's key would stay locked until
/// the block commits, so acquirers of an expired key would wait for somebody else's
/// transaction. On a cluster of its own, the table holds only this test's rows, so a sweep would
/// surely hit the expired ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_in_a_transaction_block_leave_expired_keys_free_for_others() {
    const T: &str = "grants_in_a_transaction_block_leave_expired_keys_free_for_others";
    let cluster = Cluster::shared_named("sweep-in-blocks", &[]);
    let (block, other) = (cluster.connect().await, cluster.connect().await);
    block.batch_execute("SET dlock.sweep_after = 0").await.unwrap();
    within(
        Duration::from_secs(60),
        "300 short leases",
        acquire_keys(&other, T, "expired", "short", 0..300, "50ms", false),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await; // all 300 have expired now

    // 800 grants in one open transaction block: each adds a row, and would sweep a page.
    block.client().batch_execute("BEGIN").await.unwrap();
    within(
        Duration::from_secs(60),
        "800 grants in a block",
        acquire_keys(&block, T, "in-block", "block", 0..800, "1 minute", false),
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

/// A grant that sweeps a row holds that key's lock until it commits. A try of the key meanwhile
/// (or a wait whose deadline has come) must not answer busy: the sweep changes no lease, so the
/// try waits for it (a row-lock wait, as in any table) where anything else holding the key lock
/// answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sweep_of_a_free_key_never_makes_a_try_of_it_answer_busy() {
    const T: &str = "a_sweep_of_a_free_key_never_makes_a_try_of_it_answer_busy";
    const TRIES: usize = 3_000;
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut churners = Vec::new();
    for c in 0..2 {
        let s = cluster.connect().await;
        s.batch_execute("SET dlock.sweep_after = 0").await.unwrap();
        let stop = stop.clone();
        churners.push(tokio::spawn(async move {
            let mut batch = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let marker = format!("churn{c}-{batch}");
                acquire_keys(&s, T, &marker, "churner", 0..200, "1 minute", true).await;
                batch += 1;
            }
            batch
        }));
    }
    let prober = cluster.connect().await;
    let (k, o) = (key(T, "probed"), owner(T, "prober"));
    let mut busy = 0;
    within(Duration::from_secs(120), "tries of a free key during a churn", async {
        for i in 0..TRIES {
            // dlock_try_acquire, dlock_acquire with wait => 0 (a deadline that has come), and a
            // wait of 1 ms (a deadline that may come while the sweep holds the key).
            let granted = match i % 3 {
                0 => prober.try_acquire(&k, &o, "1 minute").await.unwrap(),
                1 => prober.acquire(&k, &o, Some("1 minute"), Some("0")).await.unwrap(),
                _ => prober.acquire(&k, &o, Some("1 minute"), Some("1 millisecond")).await.unwrap(),
            };
            match granted {
                Some(_) => assert!(prober.release(&k, &o).await.unwrap(), "{k} is released"),
                None => busy += 1,
            }
        }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut batches = 0;
    for c in churners {
        batches += c.await.unwrap();
    }
    assert!(batches > 0, "the churn ran");
    assert_eq!(
        busy, 0,
        "{busy} of {TRIES} tries of a free key answered busy during {batches} batches of 200 new keys"
    );
}
