//! `dlock_stats`, `dlock_stats_reset()` and dlock's LOG lines: what dlock did is counted per
//! database (committed lease events only; waits and fast-mode calls as they happen), the wait
//! histogram agrees with the waits, a reset is for administrators and touches its own database
//! only, and the log names the key, roles and durations of long waits, force releases and
//! leases that expired under a connected holder. Each test counts in a database of its own.

use std::collections::HashMap;
use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, eventually, expect_sqlstate};

const PRELOAD: &str = "shared_preload_libraries = 'dlock'";

fn cluster() -> &'static Cluster {
    Cluster::shared_named("stats", &[PRELOAD, "dlock.fast_max_ttl = 1"])
}

/// A fresh database with dlock, and a superuser session in it.
async fn database(cluster: &Cluster, name: &str) -> Session {
    let admin = cluster.connect().await;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let s = cluster.connect_db("postgres", name).await;
    s.batch_execute("CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    s
}

/// This database's counts, by column name (the histogram and `since` left out).
async fn counts(s: &Session) -> HashMap<String, i64> {
    s.query(
        "SELECT c.key, c.value FROM dlock_stats AS st, jsonb_each_text(to_jsonb(st)) AS c \
          WHERE st.database = current_database()",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .filter_map(|r| {
        let value: Option<String> = r.get(1);
        Some((r.get(0), value?.parse().ok()?))
    })
    .collect()
}

fn n(counts: &HashMap<String, i64>, name: &str) -> i64 {
    counts.get(name).copied().unwrap_or_else(|| panic!("dlock_stats has no {name}: {counts:?}"))
}

#[tokio::test]
async fn committed_lease_events_count_and_rolled_back_ones_do_not() {
    let cluster = cluster();
    let s = database(cluster, "stats_events").await;
    let other = cluster.connect_db("postgres", "stats_events").await;
    // One statement per call: a multi-statement string is one transaction.
    for sql in [
        "SELECT dlock_acquire('a', 'o', '1 hour')",
        "SELECT dlock_acquire('a', 'o', '1 hour')",
        "SELECT dlock_release('a', 'o')",
        "SELECT dlock_release('a', 'o')",
        "SELECT dlock_acquire_shared('r', 'x', '1 hour')",
        "SELECT dlock_acquire_shared('r', 'y', '1 hour')",
        "SELECT dlock_release_all('x')",
        "SELECT dlock_force_release('r')",
        "BEGIN; SELECT dlock_acquire('never', 'o', '1 hour'); ROLLBACK",
        "BEGIN; SAVEPOINT s; SELECT dlock_acquire('never2', 'o', '1 hour'); ROLLBACK TO s; COMMIT",
    ] {
        s.batch_execute(sql).await.unwrap();
    }
    // An expiry taken over, whose holder's session is still connected.
    other.batch_execute("SELECT dlock_acquire('e', 'gone', '50 ms')").await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    s.batch_execute("SELECT dlock_acquire('e', 'next', '1 hour')").await.unwrap();
    // A watched key's release notifies.
    other.batch_execute("SELECT dlock_watch('e')").await.unwrap();
    s.batch_execute("SELECT dlock_release('e', 'next')").await.unwrap();

    let c = counts(&s).await;
    assert_eq!(n(&c, "grants"), 5, "a, r twice, e twice (never and never2 rolled back): {c:?}");
    assert_eq!(n(&c, "reentries"), 1);
    assert_eq!(n(&c, "releases"), 3, "a, x's r, e");
    assert_eq!(n(&c, "force_releases"), 1, "y's r");
    assert_eq!(n(&c, "expiries"), 1);
    assert_eq!(n(&c, "expiries_while_connected"), 1);
    assert_eq!(n(&c, "notifications"), 1);
    assert_eq!(n(&c, "waits_started"), 0);
    let log = cluster.server_log_tail(200);
    assert!(
        log.lines().any(|l| l.contains("dlock: the lease of key \"e\" (owner \"gone\"")
            && l.contains("while its holder's session")),
        "the expiry under a connected holder is logged:\n{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("dlock: key \"r\" force-released by") && l.contains("held for")),
        "the force release is logged with its durations:\n{log}"
    );
}

#[tokio::test]
async fn waits_count_by_outcome_and_fill_the_histogram() {
    let cluster = cluster();
    let s = database(cluster, "stats_waits").await;
    let holder = cluster.connect_db("postgres", "stats_waits").await;
    holder.batch_execute("SELECT dlock_acquire('k', 'holder', '1 hour')").await.unwrap();
    // Timed out.
    s.batch_execute("SELECT dlock_acquire('k', 'w', '1 hour', '100 ms')").await.unwrap();
    // Cancelled by statement_timeout.
    s.batch_execute("SET statement_timeout = '100ms'").await.unwrap();
    expect_sqlstate(
        s.batch_execute("SELECT dlock_acquire('k', 'w', '1 hour', NULL)").await,
        &SqlState::QUERY_CANCELED,
        "timeout",
    );
    s.batch_execute("RESET statement_timeout").await.unwrap();
    // Granted, handed over by the release (preloaded).
    let waiter = cluster.connect_db("postgres", "stats_waits").await;
    let task = tokio::spawn(async move {
        waiter.batch_execute("SELECT dlock_acquire('k', 'w2', '1 hour', '30 s')").await.unwrap();
    });
    eventually(Duration::from_secs(10), "the waiter waits", || async {
        holder.waiters("k").await.unwrap() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    holder.batch_execute("SELECT dlock_release('k', 'holder')").await.unwrap();
    task.await.unwrap();

    let c = counts(&s).await;
    assert_eq!(n(&c, "waits_started"), 3, "{c:?}");
    assert_eq!(n(&c, "waits_timed_out"), 1);
    assert_eq!(n(&c, "waits_cancelled"), 1);
    assert_eq!(n(&c, "waits_granted"), 1);
    assert_eq!(n(&c, "handoffs_direct") + n(&c, "handoffs_self"), 1);
    assert_eq!(n(&c, "handoffs_direct"), 1, "preloaded, the release hands the key over");
    assert_eq!(n(&c, "wait_count"), 3);
    let row = s
        .query_one(
            "SELECT wait_sum_ms::float8, wait_le_ms, wait_buckets FROM dlock_stats WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap();
    let (sum, le, buckets): (f64, Vec<f64>, Vec<i64>) = (row.get(0), row.get(1), row.get(2));
    assert!(sum >= 250.0, "three waits of about 100, 100 and 50+ ms: {sum}");
    assert_eq!(le.len(), buckets.len());
    assert!(le.last().is_some_and(|l| l.is_infinite()));
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "cumulative: {buckets:?}");
    assert_eq!(buckets.last(), Some(&3));
    let under_50ms = buckets[le.iter().position(|&l| l == 50.0).unwrap()];
    assert_eq!(under_50ms, 0, "no wait was that short: {buckets:?}");
}

/// A savepoint (or a PL/pgSQL exception block) that catches the error ending a wait keeps the
/// transaction going: the wait counts as cancelled at once, not when (or whether) it aborts.
#[tokio::test]
async fn a_wait_ended_by_an_error_in_a_savepoint_counts_at_once() {
    let cluster = cluster();
    let s = database(cluster, "stats_savepoint").await;
    let other = cluster.connect_db("postgres", "stats_savepoint").await;
    eventually(Duration::from_secs(20), "the fast lock-delay after start ends", || async {
        other
            .query_one("SELECT dlock_fast_acquire('f', 'holder', '1 s') IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0)
    })
    .await;
    other.batch_execute("SELECT dlock_acquire('k', 'holder', '1 hour')").await.unwrap();
    // (The fast wait first, well within its holder's 1 s.)
    s.batch_execute("BEGIN").await.unwrap();
    for (savepoint, wait) in [
        ("a", "SELECT dlock_fast_acquire('f', 'w', '1 s', '10 s')"),
        ("b", "SELECT dlock_acquire('k', 'w', '1 hour', NULL)"),
    ] {
        s.batch_execute(&format!("SAVEPOINT {savepoint}; SET LOCAL statement_timeout = '100ms'"))
            .await
            .unwrap();
        expect_sqlstate(s.batch_execute(wait).await, &SqlState::QUERY_CANCELED, wait);
        s.batch_execute(&format!("ROLLBACK TO SAVEPOINT {savepoint}")).await.unwrap();
    }
    let c = counts(&other).await;
    assert_eq!(
        (
            n(&c, "waits_started"),
            n(&c, "waits_cancelled"),
            n(&c, "fast_waits_started"),
            n(&c, "fast_waits_cancelled")
        ),
        (1, 1, 1, 1),
        "counted while the transaction goes on: {c:?}"
    );
    // Its next wait is a wait of its own, counted as it ends.
    let next: Option<i64> =
        s.query_one("SELECT dlock_acquire('k', 'w', '1 hour', '50 ms')", &[]).await.unwrap().get(0);
    assert_eq!(next, None);
    s.batch_execute("COMMIT").await.unwrap();
    let c = counts(&other).await;
    assert_eq!(
        (n(&c, "waits_started"), n(&c, "waits_cancelled"), n(&c, "waits_timed_out")),
        (2, 1, 1),
        "{c:?}"
    );
    assert_eq!(n(&c, "wait_count"), 3);
}

#[tokio::test]
async fn fast_mode_counts_its_calls_and_shows_its_fill() {
    let cluster = cluster();
    let s = database(cluster, "stats_fast").await;
    eventually(Duration::from_secs(20), "the fast lock-delay after start ends", || async {
        s.query_one("SELECT dlock_fast_acquire('probe', 'o', '1 s') IS NOT NULL", &[]).await.unwrap().get(0)
    })
    .await;
    s.batch_execute(
        "SELECT dlock_fast_release('probe', 'o'); \
         SELECT dlock_fast_acquire('f', 'o', '1 s'); SELECT dlock_fast_acquire('f', 'o', '1 s'); \
         SELECT dlock_fast_acquire('g', 'o', '1 s')",
    )
    .await
    .unwrap();
    let c = counts(&s).await;
    assert_eq!(n(&c, "fast_grants"), 3, "{c:?}");
    assert_eq!(n(&c, "fast_reentries"), 1);
    assert_eq!(n(&c, "fast_releases"), 1);
    assert_eq!(n(&c, "fast_leases"), 2, "f and g");
    assert!(n(&c, "fast_capacity") >= 2);
    // A waiter granted by the release, in place.
    let waiter = cluster.connect_db("postgres", "stats_fast").await;
    let task = tokio::spawn(async move {
        waiter.batch_execute("SELECT dlock_fast_acquire('g', 'w', '1 s', '10 s')").await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.batch_execute("SELECT dlock_fast_release('g', 'o')").await.unwrap();
    task.await.unwrap();
    let c = counts(&s).await;
    assert_eq!(n(&c, "fast_waits_started"), 1, "{c:?}");
    assert_eq!(n(&c, "fast_waits_granted"), 1);
    assert_eq!(n(&c, "fast_handoffs"), 1);
}

#[tokio::test]
async fn a_reset_is_for_administrators_and_touches_its_own_database_only() {
    let cluster = cluster();
    let a = database(cluster, "stats_reset_a").await;
    let b = database(cluster, "stats_reset_b").await;
    for s in [&a, &b] {
        s.batch_execute("SELECT dlock_acquire('k', 'o', '1 hour'); SELECT dlock_release('k', 'o')")
            .await
            .unwrap();
    }
    a.batch_execute(
        "DO $$ BEGIN CREATE ROLE stats_plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    )
    .await
    .unwrap();
    let plain = cluster.connect_db("stats_plain", "stats_reset_a").await;
    expect_sqlstate(
        plain.batch_execute("SELECT dlock_stats_reset()").await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "a plain role resets",
    );
    assert_eq!(n(&counts(&a).await, "grants"), 1, "nothing was reset");
    a.batch_execute("SELECT dlock_stats_reset()").await.unwrap();
    assert_eq!(n(&counts(&a).await, "grants"), 0, "reset");
    assert_eq!(n(&counts(&b).await, "grants"), 1, "the other database keeps its counts");
    let recent: bool = a
        .query_one(
            "SELECT since > now() - interval '1 minute' FROM dlock_stats WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(recent, "since moves to the reset");
}

#[tokio::test]
async fn waits_past_log_min_wait_are_logged() {
    let cluster = cluster();
    let s = database(cluster, "stats_log").await;
    s.batch_execute("ALTER DATABASE stats_log SET dlock.log_min_wait = '150ms'").await.unwrap();
    let s = cluster.connect_db("postgres", "stats_log").await;
    let holder = cluster.connect_db("postgres", "stats_log").await;
    holder
        .batch_execute(
            "SELECT dlock_acquire('slow', 'h', '1 hour'); SELECT dlock_acquire('quick', 'h', '1 hour')",
        )
        .await
        .unwrap();
    s.batch_execute("SELECT dlock_acquire('quick', 'brief', '1 hour', '20 ms')").await.unwrap();
    s.batch_execute("SELECT dlock_acquire('slow', 'patient', '1 hour', '300 ms')").await.unwrap();
    let log = cluster.server_log_tail(200);
    assert!(
        log.lines().any(|l| l.contains("dlock: durable wait of")
            && l.contains(
                "for key \"slow\" by owner \"patient\" (role postgres): not granted: its wait ran out"
            )),
        "the long wait is logged:\n{log}"
    );
    assert!(!log.contains("owner \"brief\""), "a wait under the setting is not:\n{log}");
    // A plain role cannot change the setting.
    let default: String =
        cluster.connect().await.query_one("SHOW dlock.log_min_wait", &[]).await.unwrap().get(0);
    assert_eq!(default, "-1", "off by default");
}

#[tokio::test]
async fn without_preload_there_is_nothing_to_show() {
    let s = Cluster::shared().connect().await;
    s.batch_execute(
        "SELECT dlock_acquire('stats_unloaded', 'o', '1 hour'); SELECT dlock_release('stats_unloaded', 'o')",
    )
    .await
    .unwrap();
    let rows = s.query("SELECT * FROM dlock_stats", &[]).await.unwrap();
    assert!(rows.is_empty(), "no shared memory, no counts");
}
