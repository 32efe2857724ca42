//! The second attacker's probe (security round 2), each finding as the attack it was: a role
//! running its own code as the superuser through SQL that dlock runs at commit or in its
//! worker, or bound into dlock's view at install; a failed `DROP EXTENSION` ending everyone's
//! waits; a lock-delay nobody could clear; every tenant's counters shown to every role. Each
//! test fails on release 0.2.0.
//!
//! The payloads only record what happened (as whom they ran), where the real ones ran
//! `COPY ... TO PROGRAM`.
//!
//! A binary of its own, on a preloaded cluster of its own (the release's commit-time read of
//! finding 1 happens only where the free-waiters are answered, which needs preloading).

use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, eventually, expect_sqlstate, finish, wait_for_waiters};
use tokio_postgres::{AsyncMessage, NoTls};

fn cluster() -> &'static Cluster {
    Cluster::shared_named("escapes", &["shared_preload_libraries = 'dlock'"])
}

/// A fresh database `name` owned by a new, non-superuser role of the same name that may log in
/// and use dlock, with dlock installed in `public` by the superuser: a tenant of a managed
/// service. (The superuser's session and the owner's.)
async fn tenant(name: &str) -> (Session, Session) {
    let superuser = cluster().connect().await;
    for statement in
        [format!("CREATE ROLE {name} LOGIN CREATEROLE"), format!("CREATE DATABASE {name} OWNER {name}")]
    {
        superuser.batch_execute(&statement).await.unwrap();
    }
    let admin = cluster().connect_db("postgres", name).await;
    admin.batch_execute("CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    (admin, cluster().connect_db(name, name).await)
}

/// Who a payload ran as, if it ran: the rows its table has.
async fn payload_runs(s: &Session, table: &str) -> Vec<(String, bool)> {
    s.query(&format!("SELECT who, superuser FROM {table} ORDER BY at"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// A payload function in `schema` (owned by the attacker): it records as whom it ran, in a
/// table if it can and else by taking the session advisory lock (4242, 1) when it runs as a
/// superuser, which works in a read-only transaction too; then computes `body`.
fn payload(schema: &str, name: &str, args: &str, returns: &str, body: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {schema}.ran (who text, superuser boolean, at timestamptz DEFAULT pg_catalog.clock_timestamp()); \
         GRANT INSERT ON {schema}.ran TO PUBLIC; \
         CREATE FUNCTION {schema}.{name}({args}) RETURNS {returns} LANGUAGE plpgsql AS $f$ \
         DECLARE su boolean := (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user); \
         BEGIN \
           IF su THEN PERFORM pg_catalog.pg_advisory_lock(4242, 1); END IF; \
           BEGIN INSERT INTO {schema}.ran(who, superuser) VALUES (current_user, su); \
           EXCEPTION WHEN OTHERS THEN NULL; END; \
           {body} \
         END $f$"
    )
}

/// Whether session `pid` holds the advisory lock a payload takes when it runs as a superuser.
async fn ran_as_superuser_in(observer: &Session, pid: i32) -> bool {
    observer
        .query_one(
            "SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 FROM pg_catalog.pg_locks \
             WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND classid OPERATOR(pg_catalog.=) 4242 \
               AND objid OPERATOR(pg_catalog.=) 1 AND pid OPERATOR(pg_catalog.=) $1",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0)
}

/// Finding 1: a release that frees a key someone waits to see free has the key read again at
/// commit, where the function's pinned search_path no longer applies: in a read-only
/// transaction that read went through SQL, run as the lease table's owner under the session's
/// search_path, whose `*(numeric, integer)` out-ranked pg_catalog's implicit cast.
#[tokio::test]
async fn the_commit_time_read_runs_nothing_of_the_callers_search_path() {
    let (admin, owner) = tenant("t_commit").await;
    owner.batch_execute("CREATE ROLE t_commit_app LOGIN; GRANT t_commit_app TO t_commit").await.unwrap();
    admin
        .batch_execute("CREATE SCHEMA app AUTHORIZATION t_commit_app; GRANT USAGE ON SCHEMA app TO PUBLIC")
        .await
        .unwrap();
    let app = cluster().connect_db("t_commit_app", "t_commit").await;
    app.batch_execute(&payload(
        "app",
        "times",
        "numeric, integer",
        "numeric",
        "RETURN $1 OPERATOR(pg_catalog.*) $2;",
    ))
    .await
    .unwrap();
    app.batch_execute("CREATE OPERATOR app.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = app.times)")
        .await
        .unwrap();

    // The key held shared twice, a session queued on it and one waiting to see it free.
    let s2 = cluster().connect_db("t_commit_app", "t_commit").await;
    let one: Option<i64> =
        app.query_one("SELECT dlock_acquire_shared('k', 's1', '1 hour')", &[]).await.unwrap().get(0);
    let two: Option<i64> =
        s2.query_one("SELECT dlock_acquire_shared('k', 's2', '1 hour')", &[]).await.unwrap().get(0);
    assert!(one.is_some() && two.is_some(), "both shared holds granted");
    let queued = cluster().connect_db("t_commit_app", "t_commit").await.spawn_acquire(
        "k",
        "x",
        Some("1 hour"),
        Some("30 s"),
    );
    let observer = cluster().connect_db("postgres", "t_commit").await;
    wait_for_waiters(&observer, "k", 1).await;
    let free_waiter = cluster().connect_db("t_commit_app", "t_commit").await;
    let waiting = tokio::spawn(async move {
        let free: bool =
            free_waiter.query_one("SELECT dlock_wait_free('k', '30 s')", &[]).await.unwrap().get(0);
        (free, free_waiter)
    });
    eventually(Duration::from_secs(5), "the free-waiter waits", || async {
        observer
            .query_one(
                "SELECT pg_catalog.count(*) OPERATOR(pg_catalog.=) 1 FROM pg_catalog.pg_stat_activity \
                 WHERE query OPERATOR(pg_catalog.~~) 'SELECT dlock_wait_free%' AND state OPERATOR(pg_catalog.=) 'active' \
                   AND datname OPERATOR(pg_catalog.=) pg_catalog.current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    })
    .await;

    app.batch_execute(
        "BEGIN; SELECT dlock_release('k', 's1'); SET LOCAL transaction_read_only = on; \
         SET LOCAL search_path = app; COMMIT",
    )
    .await
    .expect("the release commits");
    assert!(!ran_as_superuser_in(&observer, app.pid()).await, "the payload ran as a superuser at commit");
    assert_eq!(payload_runs(&observer, "app.ran").await, vec![], "the payload ran");

    // The rest of the story still holds: the second release hands the key to the queue, and
    // its release answers the free-waiter.
    assert!(s2.query_one("SELECT dlock_release('k', 's2')", &[]).await.unwrap().get::<_, bool>(0));
    let granted = finish(queued, Duration::from_secs(10), "queued").await;
    assert!(granted.result.unwrap().is_some(), "the queued session is granted");
    assert!(!waiting.is_finished(), "the key is held again: the free-waiter still waits");
    assert!(granted.session.release("k", "x").await.unwrap());
    let (free, _) = tokio::time::timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap();
    assert!(free, "the free-waiter is told the key is free");
}

/// Finding 2: the election watch worker connected as the bootstrap superuser and ran
/// `... WHERE kind = 'e' ...` under the database's search_path, which a database owner sets.
#[tokio::test]
async fn the_election_worker_runs_nothing_of_the_databases_search_path() {
    let (_admin, owner) = tenant("t_worker").await;
    owner
        .batch_execute(&format!(
            "CREATE SCHEMA trap; {}; \
             CREATE OPERATOR trap.= (LEFTARG = \"char\", RIGHTARG = \"char\", FUNCTION = trap.char_eq); \
             ALTER DATABASE t_worker SET search_path = trap, pg_catalog",
            payload(
                "trap",
                "char_eq",
                "\"char\", \"char\"",
                "boolean",
                "RETURN $1::text OPERATOR(pg_catalog.=) $2::text;"
            )
        ))
        .await
        .unwrap();

    // A watcher of the election, to know when the worker has announced the leader's expiry.
    let config = format!("host=127.0.0.1 port={} user=t_worker dbname=t_worker", cluster().port());
    let (listener, mut connection) = tokio_postgres::connect(&config, NoTls).await.unwrap();
    let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.channel().to_string());
            }
        }
    });
    let channel: String =
        listener.query_one("SELECT public.dlock_watch('scheduler')", &[]).await.unwrap().get(0);
    let candidate = cluster().connect_db("t_worker", "t_worker").await;
    let term: Option<i64> = candidate
        .query_one("SELECT public.dlock_campaign('scheduler', 'node-a', '1 second')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(term.is_some(), "elected");
    // The grant's own notification, then the worker's when the lease runs out unrenewed.
    let mut notifications = 0;
    while notifications < 2 {
        let got = tokio::time::timeout(Duration::from_secs(10), heard.recv()).await;
        assert_eq!(
            got.expect("the worker announces the expiry within 10 s").as_deref(),
            Some(channel.as_str())
        );
        notifications += 1;
    }

    let superuser = cluster().connect_db("postgres", "t_worker").await;
    assert_eq!(payload_runs(&superuser, "trap.ran").await, vec![], "the payload ran in the worker");
    // The worker runs as the lease table's owner, whoever installed dlock: here the bootstrap
    // superuser; `election_worker_runs_as_the_extensions_owner` shows another owner.
    let worker: Option<String> = superuser
        .query_one(
            "SELECT pg_catalog.max(usename::text) FROM pg_catalog.pg_stat_activity \
             WHERE backend_type OPERATOR(pg_catalog.=) 'dlock election watch' \
               AND datname OPERATOR(pg_catalog.=) 't_worker'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(worker.as_deref(), Some("postgres"));
}

/// The worker connects as the lease table's owner, not the bootstrap superuser.
#[tokio::test]
async fn election_worker_runs_as_the_extensions_owner() {
    let superuser = cluster().connect().await;
    superuser.batch_execute("CREATE ROLE t_installer LOGIN SUPERUSER").await.unwrap();
    superuser.batch_execute("CREATE DATABASE t_owned OWNER t_installer").await.unwrap();
    let installer = cluster().connect_db("t_installer", "t_owned").await;
    installer.batch_execute("CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    let term: Option<i64> =
        installer.query_one("SELECT dlock_campaign('e', 'node-a', '30 seconds')", &[]).await.unwrap().get(0);
    assert!(term.is_some());
    eventually(Duration::from_secs(10), "the worker runs as t_installer", || async {
        let users: Vec<String> = superuser
            .query(
                "SELECT usename::text FROM pg_catalog.pg_stat_activity \
                 WHERE backend_type OPERATOR(pg_catalog.=) 'dlock election watch' \
                   AND datname OPERATOR(pg_catalog.=) 't_owned'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        users == ["t_installer"]
    })
    .await;
}

/// `dlock_stats` as release 0.2.0's script defined it: a bare `/` between a bigint and a
/// numeric, which pg_catalog has no exact operator for.
const DLOCK_STATS_0_2_0: &str = r#"CREATE OR REPLACE VIEW public.dlock_stats AS
SELECT d.datname AS database, s.since,
       max(value) FILTER (WHERE counter = 'grants') AS grants,
       max(value) FILTER (WHERE counter = 'reentries') AS reentries,
       max(value) FILTER (WHERE counter = 'releases') AS releases,
       max(value) FILTER (WHERE counter = 'force_releases') AS force_releases,
       max(value) FILTER (WHERE counter = 'expiries') AS expiries,
       max(value) FILTER (WHERE counter = 'expiries_while_connected') AS expiries_while_connected,
       max(value) FILTER (WHERE counter = 'session_ends') AS session_ends,
       max(value) FILTER (WHERE counter = 'waits_started') AS waits_started,
       max(value) FILTER (WHERE counter = 'waits_granted') AS waits_granted,
       max(value) FILTER (WHERE counter = 'waits_timed_out') AS waits_timed_out,
       max(value) FILTER (WHERE counter = 'waits_cancelled') AS waits_cancelled,
       max(value) FILTER (WHERE counter = 'handoffs_direct') AS handoffs_direct,
       max(value) FILTER (WHERE counter = 'handoffs_self') AS handoffs_self,
       max(value) FILTER (WHERE counter = 'notifications') AS notifications,
       max(value) FILTER (WHERE counter = 'fast_grants') AS fast_grants,
       max(value) FILTER (WHERE counter = 'fast_reentries') AS fast_reentries,
       max(value) FILTER (WHERE counter = 'fast_releases') AS fast_releases,
       max(value) FILTER (WHERE counter = 'fast_expiries') AS fast_expiries,
       max(value) FILTER (WHERE counter = 'fast_waits_started') AS fast_waits_started,
       max(value) FILTER (WHERE counter = 'fast_waits_granted') AS fast_waits_granted,
       max(value) FILTER (WHERE counter = 'fast_waits_timed_out') AS fast_waits_timed_out,
       max(value) FILTER (WHERE counter = 'fast_waits_cancelled') AS fast_waits_cancelled,
       max(value) FILTER (WHERE counter = 'fast_handoffs') AS fast_handoffs,
       max(value) FILTER (WHERE counter = 'wait_count') AS wait_count,
       (max(value) FILTER (WHERE counter = 'wait_sum_us')) / 1000.0 AS wait_sum_ms,
       ARRAY[1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 'Infinity'::float8]::float8[] AS wait_le_ms,
       ARRAY[max(value) FILTER (WHERE counter = 'wait_le_1'), max(value) FILTER (WHERE counter = 'wait_le_2'), max(value) FILTER (WHERE counter = 'wait_le_5'), max(value) FILTER (WHERE counter = 'wait_le_10'), max(value) FILTER (WHERE counter = 'wait_le_25'), max(value) FILTER (WHERE counter = 'wait_le_50'), max(value) FILTER (WHERE counter = 'wait_le_100'), max(value) FILTER (WHERE counter = 'wait_le_250'), max(value) FILTER (WHERE counter = 'wait_le_500'), max(value) FILTER (WHERE counter = 'wait_le_1000'), max(value) FILTER (WHERE counter = 'wait_le_2500'), max(value) FILTER (WHERE counter = 'wait_le_5000'), max(value) FILTER (WHERE counter = 'wait_le_10000'), max(value) FILTER (WHERE counter = 'wait_le_30000'), max(value) FILTER (WHERE counter = 'wait_le_60000'), max(value) FILTER (WHERE counter = 'wait_le_inf')] AS wait_buckets,
       max(value) FILTER (WHERE counter = 'fast_leases') AS fast_leases,
       max(value) FILTER (WHERE counter = 'fast_capacity') AS fast_capacity
FROM dlock_internal.stats() AS s
LEFT JOIN pg_catalog.pg_database AS d ON d.oid = s.database
GROUP BY s.database, d.datname, s.since"#;

/// Finding 3: an operator a database owner put in `public` before `CREATE EXTENSION dlock` (or
/// before `ALTER EXTENSION dlock UPDATE` of a 0.1.0 there) was bound into `dlock_stats`, and
/// every reader of the view then ran it.
#[tokio::test]
async fn install_and_update_bind_no_operator_of_the_installers_search_path() {
    for (db, install) in [
        ("t_install", "CREATE EXTENSION dlock SCHEMA public"),
        ("t_update", "CREATE EXTENSION dlock SCHEMA public VERSION '0.1.0'; ALTER EXTENSION dlock UPDATE"),
        ("t_update2", "CREATE EXTENSION dlock SCHEMA public VERSION '0.2.0'; ALTER EXTENSION dlock UPDATE"),
    ] {
        let superuser = cluster().connect().await;
        superuser.batch_execute(&format!("CREATE ROLE {db} LOGIN")).await.unwrap();
        superuser.batch_execute(&format!("CREATE DATABASE {db} OWNER {db}")).await.unwrap();
        let owner = cluster().connect_db(db, db).await;
        owner
            .batch_execute(&format!(
                "{}; DROP OPERATOR IF EXISTS public./ (bigint, numeric); CREATE OPERATOR public./ (LEFTARG = bigint, RIGHTARG = numeric, FUNCTION = public.divide)",
                payload("public", "divide", "bigint, numeric", "numeric", "RETURN $1::numeric OPERATOR(pg_catalog./) $2;"),
            ))
            .await
            .unwrap();
        let admin = cluster().connect_db("postgres", db).await;
        admin.batch_execute(install).await.unwrap_or_else(|e| panic!("{db}: {e}"));
        let rows: i64 =
            admin.query_one("SELECT pg_catalog.count(*) FROM public.dlock_stats", &[]).await.unwrap().get(0);
        assert!(rows >= 1, "{db}: the view has this database's row");
        assert_eq!(payload_runs(&admin, "public.ran").await, vec![], "{db}: a payload ran");
        let bound: Vec<String> = admin
            .query(
                "SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) OPERATOR(pg_catalog.||) ' uses ' \
                        OPERATOR(pg_catalog.||) pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid) \
                 FROM pg_catalog.pg_depend d \
                 JOIN pg_catalog.pg_operator o ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass \
                      AND o.oid OPERATOR(pg_catalog.=) d.refobjid \
                 WHERE o.oprnamespace OPERATOR(pg_catalog.=) 'public'::pg_catalog.regnamespace",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(bound, Vec::<String>::new(), "{db}: dlock's objects use the planted operators");
    }
}

/// An update replaces a `dlock_stats` that 0.2.0's script bound to a planted operator.
#[tokio::test]
async fn the_update_unbinds_what_0_2_0_bound() {
    let superuser = cluster().connect().await;
    superuser.batch_execute("CREATE DATABASE t_rebind").await.unwrap();
    let admin = cluster().connect_db("postgres", "t_rebind").await;
    admin
        .batch_execute(&format!(
            "{}; DROP OPERATOR IF EXISTS public./ (bigint, numeric); CREATE OPERATOR public./ (LEFTARG = bigint, RIGHTARG = numeric, FUNCTION = public.divide); \
             CREATE EXTENSION dlock SCHEMA public VERSION '0.2.0'; \
             SET search_path = public; {DLOCK_STATS_0_2_0}; RESET search_path",
            payload("public", "divide", "bigint, numeric", "numeric", "RETURN $1::numeric OPERATOR(pg_catalog./) $2;"),
        ))
        .await
        .unwrap();
    let uses = || async {
        admin
            .query_one(
                "SELECT pg_catalog.count(*) FROM pg_catalog.pg_depend d \
                 WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass \
                   AND d.refobjid OPERATOR(pg_catalog.=) 'public./(bigint, numeric)'::pg_catalog.regoperator",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(uses().await, 1, "the attacked 0.2.0 state: the view uses the planted operator");
    admin.batch_execute("ALTER EXTENSION dlock UPDATE").await.unwrap();
    assert_eq!(uses().await, 0, "the update's view no longer uses it");
}

/// Finding 4: the event trigger announced the drop at `ddl_command_start`, before PostgreSQL
/// checked anything, so a role that may not drop dlock ended every wait by trying to.
#[tokio::test]
async fn a_drop_that_fails_ends_no_wait() {
    let (admin, _owner) = tenant("t_drop").await;
    admin
        .batch_execute("CREATE ROLE t_drop_mallory LOGIN; CREATE VIEW public.my_locks AS SELECT key FROM public.dlock_locks")
        .await
        .unwrap();
    let holder = cluster().connect_db("postgres", "t_drop").await;
    holder.try_acquire("k", "a", "1 hour").await.unwrap().expect("granted");
    let waiter = cluster().connect_db("postgres", "t_drop").await.spawn_acquire(
        "k",
        "w",
        Some("1 hour"),
        Some("60 s"),
    );
    let free_waiter = cluster().connect_db("postgres", "t_drop").await;
    let waiting_free = tokio::spawn(async move {
        let result = free_waiter
            .query_one("SELECT dlock_wait_free('k', '60 s')", &[])
            .await
            .map(|r| r.get::<_, bool>(0));
        (result, free_waiter)
    });
    wait_for_waiters(&admin, "k", 1).await;

    let mallory = cluster().connect_db("t_drop_mallory", "t_drop").await;
    for attempt in 0..10 {
        expect_sqlstate(
            mallory.batch_execute("DROP EXTENSION dlock").await,
            &SqlState::INSUFFICIENT_PRIVILEGE,
            &format!("mallory's drop #{attempt}"),
        );
        expect_sqlstate(
            mallory.batch_execute("DROP EXTENSION IF EXISTS dlock, no_such_extension").await,
            &SqlState::INSUFFICIENT_PRIVILEGE,
            "mallory's drop of two",
        );
    }
    // The owner's own drop fails too when another object depends on dlock's (RESTRICT): by
    // the dependency, or by waiting for the waits' locks first (PostgreSQL locks what it would
    // drop before it finds the dependent view), which a lock_timeout cuts short. And when it
    // names an extension that does not exist.
    admin.batch_execute("SET lock_timeout = '1s'").await.unwrap();
    let restricted = admin.batch_execute("DROP EXTENSION dlock").await;
    let code = restricted.as_ref().err().and_then(|e| e.code()).cloned();
    assert!(
        [Some(SqlState::DEPENDENT_OBJECTS_STILL_EXIST), Some(SqlState::LOCK_NOT_AVAILABLE)].contains(&code),
        "a drop with a dependent view fails: {restricted:?}"
    );
    admin.batch_execute("RESET lock_timeout").await.unwrap();
    expect_sqlstate(
        admin.batch_execute("DROP EXTENSION dlock, no_such_extension CASCADE").await,
        &SqlState::UNDEFINED_OBJECT,
        "a drop of a missing extension",
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the wait goes on after every failed drop");
    assert!(!waiting_free.is_finished(), "the free-wait goes on after every failed drop");
    assert_eq!(admin.waiters("k").await.unwrap(), 1);
    // New waits are not refused either.
    let late = cluster().connect_db("postgres", "t_drop").await;
    assert_eq!(late.acquire("k", "late", Some("1 hour"), Some("200 ms")).await.unwrap(), None);

    assert!(holder.release("k", "a").await.unwrap());
    let granted = finish(waiter, Duration::from_secs(10), "waiter").await;
    assert!(granted.result.unwrap().is_some(), "the waiter is granted when the key is freed");
    assert!(granted.session.release("k", "w").await.unwrap());
    let (free, _) = tokio::time::timeout(Duration::from_secs(10), waiting_free).await.unwrap().unwrap();
    assert!(free.unwrap(), "the free-waiter sees the key free");

    // A drop that goes ahead still ends the waits at once.
    holder.try_acquire("k", "a", "1 hour").await.unwrap().expect("granted");
    let doomed =
        cluster().connect_db("postgres", "t_drop").await.spawn_acquire("k", "w", Some("1 hour"), None);
    wait_for_waiters(&admin, "k", 1).await;
    tokio::time::timeout(Duration::from_secs(15), admin.batch_execute("DROP EXTENSION dlock CASCADE"))
        .await
        .expect("the drop does not wait for the wait")
        .unwrap();
    let ended = finish(doomed, Duration::from_secs(10), "doomed").await;
    expect_sqlstate(ended.result, &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, "the wait the drop ended");
}

/// Finding 5: a short lease with a day's lock-delay, left to expire, held the key back from
/// everyone for a day, and a superuser's force release answered false.
#[tokio::test]
async fn force_release_ends_a_lock_delay() {
    let (admin, _owner) = tenant("t_delay").await;
    admin.batch_execute("CREATE ROLE t_delay_b LOGIN; CREATE ROLE t_delay_c LOGIN").await.unwrap();
    let b = cluster().connect_db("t_delay_b", "t_delay").await;
    let c = cluster().connect_db("t_delay_c", "t_delay").await;
    let fence: Option<i64> =
        b.query_one("SELECT dlock_acquire('k', 'b', '1 second', '0 s', '1 day')", &[]).await.unwrap().get(0);
    let fence = fence.expect("granted");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let row =
        c.query_one("SELECT fence, retry_after FROM dlock_try_acquire('k', 'c', '10 s')", &[]).await.unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), None, "held back by the lock-delay");
    let waiter = cluster().connect_db("t_delay_c", "t_delay").await.spawn_acquire(
        "k",
        "w",
        Some("10 s"),
        Some("30 s"),
    );
    // (dlock_locks lists live leases only: a key held back by a lock-delay has no row.)
    eventually(Duration::from_secs(5), "the waiter waits", || async {
        admin
            .query_one(
                "SELECT pg_catalog.count(*) OPERATOR(pg_catalog.=) 1 FROM pg_catalog.pg_stat_activity \
                 WHERE query OPERATOR(pg_catalog.~~) '%dlock_acquire%' AND state OPERATOR(pg_catalog.=) 'active' \
                   AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() \
                   AND datname OPERATOR(pg_catalog.=) pg_catalog.current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    })
    .await;

    let c_force = c.force_release("k").await;
    expect_sqlstate(c_force, &SqlState::INSUFFICIENT_PRIVILEGE, "a plain role's force release");
    assert!(admin.force_release("k").await.unwrap(), "a force release ends the lock-delay");
    let granted = finish(waiter, Duration::from_secs(5), "the waiter behind the delay").await;
    let next = granted.result.unwrap().expect("granted at once");
    assert!(next > fence, "a larger fence: {next} > {fence}");
    assert!(!admin.force_release("nothing-here").await.unwrap(), "nothing to free");
}

/// Finding 6: `dlock_stats` showed every database's name and counts to every role.
#[tokio::test]
async fn dlock_stats_shows_other_databases_only_to_monitors_and_admins() {
    let (admin, owner) = tenant("t_stats_a").await;
    let (admin_b, _) = tenant("t_stats_b").await;
    for s in [&admin, &admin_b] {
        s.try_acquire("k", "o", "1 hour").await.unwrap().expect("granted");
    }
    admin
        .batch_execute(
            "CREATE ROLE t_stats_monitor LOGIN IN ROLE pg_monitor; \
             CREATE ROLE t_stats_admin LOGIN IN ROLE dlock_admin; CREATE ROLE t_stats_plain LOGIN",
        )
        .await
        .unwrap();
    let databases = |role: &'static str| async move {
        let s = cluster().connect_db(role, "t_stats_a").await;
        let names: Vec<Option<String>> = s
            .query("SELECT database FROM dlock_stats ORDER BY database", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        names
    };
    for role in ["t_stats_plain", "t_stats_a"] {
        assert_eq!(
            databases(role).await,
            vec![Some("t_stats_a".to_string())],
            "{role} sees its own database"
        );
    }
    for role in ["t_stats_monitor", "t_stats_admin", "postgres"] {
        let seen = databases(role).await;
        for db in ["t_stats_a", "t_stats_b"] {
            assert!(seen.contains(&Some(db.to_string())), "{role} sees {db}: {seen:?}");
        }
    }
    drop(owner);
}

/// Where dlock's functions get their search_path. A function PostgreSQL runs as SQL text must
/// pin its own (none of dlock's is, today). dlock's C functions pin none: the only names they
/// resolve are in their statements, and every statement pins `pg_catalog, dlock_internal,
/// pg_temp` around itself (`pg/spi.rs`), at commit and in workers too, where a function's SET
/// clause would not reach; `search_path.rs` holds them to it with every call taking the SQL
/// path. A SET clause would cost the lock cycle, which runs no statement, a tenth of a pair.
/// Any path a function does pin (the event trigger's) names only schemas no caller creates
/// objects in, `pg_catalog` first and `pg_temp` last.
#[tokio::test]
async fn sql_functions_pin_their_search_path_and_c_functions_leave_it_to_their_statements() {
    let s = cluster().connect().await;
    let rows = s
        .query(
            "SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text, p.proname::pg_catalog.text, \
                    l.lanname::pg_catalog.text, \
                    (SELECT pg_catalog.substr(c, 13) FROM pg_catalog.unnest(p.proconfig) c \
                      WHERE c OPERATOR(pg_catalog.~~) 'search_path=%') \
             FROM pg_catalog.pg_depend d \
             JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid \
             JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang \
             WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
               AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
               AND d.refobjid OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_extension \
                                                       WHERE extname OPERATOR(pg_catalog.=) 'dlock') \
               AND d.deptype OPERATOR(pg_catalog.=) 'e'",
            &[],
        )
        .await
        .unwrap();
    assert!(rows.len() >= 20, "dlock's functions: {}", rows.len());
    let mut pinned = Vec::new();
    for row in &rows {
        let (signature, name, language, path): (String, String, String, Option<String>) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let Some(path) = path else {
            assert_eq!(language, "c", "{signature} is run as SQL text: it must pin its search_path");
            continue;
        };
        pinned.push(name);
        let schemas: Vec<&str> = path.split(',').map(str::trim).collect();
        let position = |schema: &str| schemas.iter().position(|s| *s == schema);
        assert_eq!(position("pg_catalog"), Some(0), "{signature}: pg_catalog first in {path:?}");
        assert!(
            position("pg_temp").is_some(),
            "{signature}: pg_temp named (else it comes first) in {path:?}"
        );
        assert_eq!(position("pg_temp"), Some(schemas.len() - 1), "{signature}: pg_temp last in {path:?}");
        assert!(
            schemas.iter().all(|s| ["pg_catalog", "dlock_internal", "pg_temp"].contains(s)),
            "{signature}: only schemas no caller can create objects in: {path:?}"
        );
    }
    // The lock cycle's functions pay for no SET clause.
    for hot in ["dlock_acquire", "dlock_release", "dlock_renew", "dlock_try_acquire", "dlock_fast_acquire"] {
        assert!(!pinned.iter().any(|name| name == hot), "{hot} pins a search_path at function level");
    }
}

/// Where every object of dlock's that PostgreSQL keeps an expression of (views, constraints,
/// indexes, column defaults, functions' argument defaults) finds the operators, functions,
/// types and collations it uses.
const FOREIGN_DEPENDENCIES: &str = "\
WITH ext AS (SELECT oid FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'dlock'),
members AS (SELECT d.classid, d.objid FROM pg_catalog.pg_depend d, ext
            WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
              AND d.refobjid OPERATOR(pg_catalog.=) ext.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'),
parts AS (SELECT classid, objid FROM members
          UNION
          SELECT d.classid, d.objid FROM pg_catalog.pg_depend d JOIN members m
            ON d.refclassid OPERATOR(pg_catalog.=) m.classid AND d.refobjid OPERATOR(pg_catalog.=) m.objid
           AND d.deptype OPERATOR(pg_catalog.=) ANY (ARRAY['a', 'i']::pg_catalog.\"char\"[])),
uses AS (SELECT p.classid, p.objid, d.refclassid, d.refobjid, d.refobjsubid FROM parts p
         JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) p.classid
          AND d.objid OPERATOR(pg_catalog.=) p.objid)
SELECT pg_catalog.pg_describe_object(u.classid, u.objid, 0) OPERATOR(pg_catalog.||) ' uses '
       OPERATOR(pg_catalog.||) pg_catalog.pg_describe_object(u.refclassid, u.refobjid, u.refobjsubid)
FROM uses u
LEFT JOIN pg_catalog.pg_operator o ON u.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass
     AND o.oid OPERATOR(pg_catalog.=) u.refobjid
LEFT JOIN pg_catalog.pg_proc f ON u.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
     AND f.oid OPERATOR(pg_catalog.=) u.refobjid
LEFT JOIN pg_catalog.pg_type t ON u.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
     AND t.oid OPERATOR(pg_catalog.=) u.refobjid
LEFT JOIN pg_catalog.pg_collation c ON u.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_collation'::pg_catalog.regclass
     AND c.oid OPERATOR(pg_catalog.=) u.refobjid
WHERE COALESCE(o.oprnamespace, f.pronamespace, t.typnamespace, c.collnamespace) IS NOT NULL
  AND NOT EXISTS (SELECT FROM members m WHERE m.classid OPERATOR(pg_catalog.=) u.refclassid
                                         AND m.objid OPERATOR(pg_catalog.=) u.refobjid)
ORDER BY 1";

/// The hostile-schema net around an install, an update and every kind of call, in a database
/// whose `public` is full of traps and first on its search_path, ahead of pg_catalog: no trap
/// runs, and nothing dlock keeps an expression of uses any object of theirs.
#[tokio::test]
async fn installs_updates_and_calls_spring_no_trap() {
    let superuser = cluster().connect().await;
    for (db, install) in [
        ("t_planted", "CREATE EXTENSION dlock SCHEMA public"),
        (
            "t_planted_old",
            "CREATE EXTENSION dlock SCHEMA public VERSION '0.1.0'; ALTER EXTENSION dlock UPDATE",
        ),
    ] {
        superuser.batch_execute(&format!("CREATE DATABASE {db} TEMPLATE template0")).await.unwrap();
        cluster().plant_traps(db);
        superuser
            .batch_execute(&format!("ALTER DATABASE {db} SET search_path = public, pg_catalog"))
            .await
            .unwrap();
        let admin = cluster().connect_db("postgres", db).await;
        admin
            .batch_execute(&format!("SET dlock_trap.armed = on; {install}; RESET dlock_trap.armed"))
            .await
            .unwrap_or_else(|e| panic!("{db}: {e}"));
        let foreign: Vec<String> =
            admin.query(FOREIGN_DEPENDENCIES, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(foreign, Vec::<String>::new(), "{db}: dlock's objects use objects of other schemas");

        // Every kind of call, with the traps first on the path and the session's own too.
        let a = cluster().connect_db("postgres", db).await;
        let b = cluster().connect_db("postgres", db).await;
        a.batch_execute("SET search_path = public").await.unwrap();
        b.batch_execute("SET search_path = public, pg_catalog").await.unwrap();
        let fence = a.try_acquire("k", "a", "1 hour").await.unwrap().expect("granted");
        assert_eq!(a.acquire("k", "a", Some("1 hour"), Some("0")).await.unwrap(), Some(fence));
        assert!(a.renew("k", "a", Some("2 hours")).await.unwrap().is_some());
        assert!(a.holds("k", fence).await.unwrap());
        let waiter =
            cluster().connect_db("postgres", db).await.spawn_acquire("k", "w", Some("1 hour"), Some("30 s"));
        wait_for_waiters(&b, "k", 1).await;
        a.batch_execute(
            "BEGIN; SELECT dlock_release('k', 'a'); SELECT dlock_release('k', 'a'); \
             SET LOCAL transaction_read_only = on; SET LOCAL search_path = public; COMMIT",
        )
        .await
        .unwrap();
        let w = finish(waiter, Duration::from_secs(10), "waiter").await;
        assert!(w.result.unwrap().is_some());
        b.batch_execute(
            "SELECT dlock_acquire_shared('s', 'r1', '1 hour'); SELECT dlock_acquire_shared('sem', 'r2', '1 hour', max_holders => 2); \
             SELECT dlock_acquire_all(ARRAY['m1', 'm2'], 'm', '1 hour'); SELECT dlock_campaign('e', 'c', '1 hour', info => 'i'); \
             SELECT * FROM dlock_leader('e'); SELECT dlock_release_all('m'); SELECT dlock_acquire('d', 'd', '1 hour', '0 s', '1 s'); \
             SELECT dlock_force_release('d'); SELECT dlock_wait_free('d', '1 s'); SELECT dlock_watch('d'); \
             SELECT dlock_unwatch('d'); SELECT * FROM dlock_locks; SELECT * FROM dlock_stats; \
             SELECT dlock_acquire('bound', 'b', NULL); SELECT dlock_release('bound', 'b'); \
             SELECT * FROM dlock_try_acquire('s', 'x', '1 s')",
        )
        .await
        .unwrap();
        assert_eq!(cluster().sprung_traps(db), Vec::<String>::new(), "{db}: traps sprang");
    }
}
