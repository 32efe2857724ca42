//! A server's side of keys over several servers (extension/src/shards/): it grants only keys its
//! map gives it and only to clients whose map is not newer (0F001, 0F000); a lease of a key it
//! gave away is not renewed; a key it gained waits behind its gate until the previous owner is
//! drained or its timer runs out; fences of a later epoch are above every earlier one; an
//! install waits for the grants made under the map it replaces; only administrators change the
//! map. Each "server" here is a database of one cluster: the map is per database.

use std::time::Duration;

use dlock_core::shards::ShardMap;
use dlock_tests::{Cluster, Session, SqlState, expect_sqlstate, within};

const COUNTER_BITS: u32 = 43;

/// A fresh database `name` with dlock, and a superuser session on it.
async fn server(cluster: &Cluster, name: &str) -> Session {
    let superuser = cluster.connect().await;
    superuser.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    superuser.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let s = cluster.connect_db("postgres", name).await;
    s.batch_execute("CREATE EXTENSION IF NOT EXISTS dlock SCHEMA public").await.unwrap();
    s
}

fn map(epoch: i64, servers: &[&str]) -> ShardMap {
    ShardMap::new(epoch, servers.iter().copied()).unwrap()
}

/// A key `owner` owns under `now` that `before` gave to `from` (`None`: any key of `owner`).
fn key_of(now: &ShardMap, owner: &str, before: Option<(&ShardMap, &str)>) -> String {
    (0..10_000)
        .map(|i| format!("key:{i}"))
        .find(|k| now.owner(k) == owner && before.is_none_or(|(m, from)| m.owner(k) == from))
        .expect("such a key")
}

async fn install(
    s: &Session,
    me: &str,
    new: &ShardMap,
    previous: Option<&ShardMap>,
) -> Result<bool, tokio_postgres::Error> {
    let servers: Vec<&str> = new.servers().iter().map(String::as_str).collect();
    let (pe, ps): (Option<i64>, Option<Vec<&str>>) = match previous {
        Some(p) => (Some(p.epoch()), Some(p.servers().iter().map(String::as_str).collect())),
        None => (None, None),
    };
    s.query_one("SELECT dlock_shard_install($1, $2, $3, $4, $5)", &[&me, &new.epoch(), &servers, &pe, &ps])
        .await
        .map(|r| r.get(0))
}

async fn draining(s: &Session, epoch: i64) -> i64 {
    s.query_one("SELECT dlock_shard_draining($1)", &[&epoch]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_server_grants_only_its_own_keys_and_fences_carry_the_epoch() {
    let cluster = Cluster::shared();
    let a = server(cluster, "shard_own_a").await;
    // No map: every key, fences as they were; a client that routes with a map is sent away.
    let before = a.try_acquire("anything", "o", "1 hour").await.unwrap().expect("granted");
    assert!(before < 1 << COUNTER_BITS);
    a.batch_execute("SET dlock.shard_epoch = 1").await.unwrap();
    expect_sqlstate(a.try_acquire("other", "o", "1 hour").await, &SqlState::LOCATOR_EXCEPTION, "map behind");
    a.batch_execute("RESET dlock.shard_epoch").await.unwrap();

    let m1 = map(1, &["a", "b"]);
    let held_elsewhere = key_of(&m1, "b", None);
    let fence_b = a.try_acquire(&held_elsewhere, "o", "1 hour").await.unwrap().expect("granted");
    assert!(install(&a, "a", &m1, None).await.unwrap(), "installed");
    assert!(!install(&a, "a", &m1, None).await.unwrap(), "installing it again is a no-op");
    let status =
        a.query_one("SELECT me, epoch, servers, complete FROM dlock_shard_status()", &[]).await.unwrap();
    assert_eq!(status.get::<_, String>(0), "a");
    assert_eq!(status.get::<_, i64>(1), 1);
    assert_eq!(status.get::<_, Vec<String>>(2), ["a", "b"]);
    assert!(status.get::<_, bool>(3));

    // Its own keys, with fences of epoch 1 (above every fence before, here or anywhere).
    let mine = key_of(&m1, "a", None);
    let fence = a.try_acquire(&mine, "o", "1 hour").await.unwrap().expect("granted");
    assert_eq!(fence >> COUNTER_BITS, 1, "fence {fence} carries epoch 1");
    assert!(fence > fence_b);
    let shared: i64 = a
        .query_one("SELECT dlock_acquire_shared($1 || ':shared', 'r', '1 hour')", &[&format!("{{{mine}}}")])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shared >> COUNTER_BITS, 1);

    // Another server's keys: refused, naming the server, by every way of taking one.
    let theirs = key_of(&m1, "b", None);
    let refused = a.try_acquire(&theirs, "o", "1 hour").await.unwrap_err();
    let message = refused.as_db_error().unwrap().message().to_owned();
    assert_eq!(refused.code(), Some(&SqlState::L_E_INVALID_SPECIFICATION));
    assert!(
        message.contains(&format!("{theirs:?}")) && message.contains("\"b\"") && message.contains("epoch 1"),
        "{message}"
    );
    for sql in [
        "SELECT dlock_acquire($1, 'o', '1 hour', '1 second')",
        "SELECT dlock_acquire($1, 'o', NULL)",
        "SELECT fence FROM dlock_try_acquire($1, 'o', '1 hour')",
        "SELECT dlock_acquire_shared($1, 'o', '1 hour')",
        "SELECT dlock_campaign($1, 'o', '1 hour')",
        "SELECT dlock_acquire_all(ARRAY[$1], 'o', '1 hour')",
    ] {
        expect_sqlstate(a.query_one(sql, &[&theirs]).await, &SqlState::L_E_INVALID_SPECIFICATION, sql);
    }
    let both = [mine.clone(), theirs.clone()];
    expect_sqlstate(
        a.query_one("SELECT dlock_acquire_all($1, 'o2', '1 hour')", &[&both.to_vec()]).await,
        &SqlState::L_E_INVALID_SPECIFICATION,
        "acquire_all with one key of another server",
    );
    assert_eq!(
        a.lease(&mine).await.unwrap().and_then(|l| l.owner).as_deref(),
        Some("o"),
        "nothing of the refused set was taken"
    );

    // The lease it held of a key it gave away: not renewed, not re-entered, still releasable.
    expect_sqlstate(
        a.renew(&held_elsewhere, "o", Some("1 hour")).await,
        &SqlState::L_E_INVALID_SPECIFICATION,
        "renew",
    );
    expect_sqlstate(
        a.try_acquire(&held_elsewhere, "o", "1 hour").await,
        &SqlState::L_E_INVALID_SPECIFICATION,
        "reentry",
    );
    assert!(
        a.holds(&held_elsewhere, fence_b).await.unwrap(),
        "still live until it ends: its fence still holds"
    );
    assert_eq!(draining(&a, 1).await, 1);
    assert!(a.release(&held_elsewhere, "o").await.unwrap());
    assert_eq!(draining(&a, 1).await, 0);

    // Fast mode has no epoch in its fences: none of it on a sharded server.
    expect_sqlstate(
        a.query_one("SELECT dlock_fast_acquire($1, 'o', '10 seconds')", &[&mine]).await,
        &SqlState::FEATURE_NOT_SUPPORTED,
        "fast mode",
    );
    // A client with a newer map than the server's: sent away (the server may not know yet).
    a.batch_execute("SET dlock.shard_epoch = 2").await.unwrap();
    expect_sqlstate(a.try_acquire(&mine, "o", "1 hour").await, &SqlState::LOCATOR_EXCEPTION, "client ahead");
    expect_sqlstate(
        a.renew(&mine, "o", Some("1 hour")).await,
        &SqlState::LOCATOR_EXCEPTION,
        "renew, client ahead",
    );
    a.batch_execute("SET dlock.shard_epoch = 1").await.unwrap();
    assert!(a.renew(&mine, "o", Some("1 hour")).await.unwrap().is_some());
}

#[tokio::test]
async fn a_moved_key_waits_for_its_old_server_and_its_fence_is_above() {
    let cluster = Cluster::shared();
    let (a, b, c) = (
        server(cluster, "shard_move_a").await,
        server(cluster, "shard_move_b").await,
        server(cluster, "shard_move_c").await,
    );
    let m1 = map(1, &["a", "b"]);
    install(&a, "a", &m1, None).await.unwrap();
    install(&b, "b", &m1, None).await.unwrap();
    let from_a = key_of(&map(2, &["a", "b", "c"]), "c", Some((&m1, "a")));
    let from_b = key_of(&map(2, &["a", "b", "c"]), "c", Some((&m1, "b")));
    let old_fence = a.try_acquire(&from_a, "w", "1 hour").await.unwrap().expect("a grants its key");

    // c joins (epoch 2): the old servers first, then c, which gates against a and b.
    let m2 = map(2, &["a", "b", "c"]);
    install(&a, "a", &m2, Some(&m1)).await.unwrap();
    install(&b, "b", &m2, Some(&m1)).await.unwrap();
    install(&c, "c", &m2, Some(&m1)).await.unwrap();
    let complete: bool = c.query_one("SELECT complete FROM dlock_shard_status()", &[]).await.unwrap().get(0);
    assert!(!complete, "c's gates are closed");
    let gates: Vec<(String, bool)> = c
        .query("SELECT from_server, open FROM dlock_shard_gates() ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(gates, [("a".to_string(), false), ("b".to_string(), false)]);

    // a no longer grants the key; c does not either while a may hold it: the key is busy there.
    expect_sqlstate(
        a.try_acquire(&from_a, "x", "1 hour").await,
        &SqlState::L_E_INVALID_SPECIFICATION,
        "a lost it",
    );
    assert_eq!(c.try_acquire(&from_a, "x", "1 hour").await.unwrap(), None, "gated on c");
    let waited = within(
        Duration::from_secs(10),
        "a bounded wait on a gated key",
        c.acquire(&from_a, "x", Some("1 hour"), Some("300 milliseconds")),
    )
    .await
    .unwrap();
    assert_eq!(waited, None, "still gated when the wait ran out");
    // The drain check: a still holds it.
    assert_eq!(draining(&a, 2).await, 1);
    assert!(a.release(&from_a, "w").await.unwrap());
    assert_eq!(draining(&a, 2).await, 0);
    expect_sqlstate(
        c.query_one("SELECT dlock_shard_drained('a', 1)", &[]).await,
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "a drain of another epoch",
    );
    expect_sqlstate(
        c.query_one("SELECT dlock_shard_drained('zz', 2)", &[]).await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "no such gate",
    );
    assert!(c.query_one("SELECT dlock_shard_drained('a', 2)", &[]).await.unwrap().get::<_, bool>(0));
    let new_fence = c.try_acquire(&from_a, "x", "1 hour").await.unwrap().expect("c grants it now");
    assert!(new_fence > old_fence, "{new_fence} > {old_fence}");
    assert_eq!(new_fence >> COUNTER_BITS, 2);

    // b cannot be reached (say): its keys open on a timer, not before.
    assert_eq!(c.try_acquire(&from_b, "x", "1 hour").await.unwrap(), None, "gated on c");
    c.query_one("SELECT dlock_shard_timer('b', 2, '700 milliseconds')", &[]).await.unwrap();
    assert_eq!(c.try_acquire(&from_b, "x", "1 hour").await.unwrap(), None, "the timer runs");
    let waited = within(
        Duration::from_secs(10),
        "a wait past the gate's timer",
        c.acquire(&from_b, "x", Some("1 hour"), Some("5 seconds")),
    )
    .await
    .unwrap();
    assert!(waited.is_some_and(|f| f >> COUNTER_BITS == 2), "granted once the gate opened: {waited:?}");
    assert!(c.query_one("SELECT complete FROM dlock_shard_status()", &[]).await.unwrap().get::<_, bool>(0));

    // One change at a time: a newer map is refused on c until its move is complete (it is), and
    // maps only go forward.
    expect_sqlstate(
        install(&c, "c", &map(1, &["a", "c"]), None).await,
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "older map",
    );
    expect_sqlstate(
        install(&c, "c", &map(2, &["a", "c"]), Some(&m1)).await,
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "another map of the same epoch",
    );
}

#[tokio::test]
async fn an_install_waits_for_grants_made_under_the_old_map_without_holding_up_others() {
    let cluster = Cluster::shared();
    let a = server(cluster, "shard_wait_a").await;
    let granting = cluster.connect_db("postgres", "shard_wait_a").await;
    let other = cluster.connect_db("postgres", "shard_wait_a").await;
    let m1 = map(1, &["a", "b"]);
    let theirs = key_of(&m1, "b", None);
    // A grant of a key the new map gives away, in a transaction still open.
    granting.batch_execute("BEGIN").await.unwrap();
    granting.try_acquire(&theirs, "o", "1 hour").await.unwrap().expect("granted under no map");
    a.batch_execute("SET statement_timeout = '500ms'").await.unwrap();
    expect_sqlstate(
        install(&a, "a", &m1, None).await,
        &SqlState::QUERY_CANCELED,
        "install waits for the open grant",
    );
    // Meanwhile nobody else is held up by the install's wait.
    let installing = {
        let a2 = cluster.connect_db("postgres", "shard_wait_a").await;
        let m1 = m1.clone();
        tokio::spawn(async move { install(&a2, "a", &m1, None).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let free = key_of(&m1, "a", None);
    within(
        Duration::from_secs(2),
        "a grant beside a waiting install",
        other.try_acquire(&free, "p", "1 hour"),
    )
    .await
    .unwrap()
    .expect("granted");
    assert!(!installing.is_finished(), "the install waits");
    granting.batch_execute("COMMIT").await.unwrap();
    assert!(within(Duration::from_secs(5), "the install", installing).await.unwrap().unwrap());
    // The grant made under no map counts as a lease the move waits for.
    assert_eq!(draining(&a, 1).await, 1);
}

#[tokio::test]
async fn only_administrators_change_the_map_and_bad_maps_are_refused() {
    let cluster = Cluster::shared();
    let a = server(cluster, "shard_roles_a").await;
    a.batch_execute(
        "DO $$ BEGIN CREATE ROLE shard_plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         GRANT USAGE ON SCHEMA public TO shard_plain",
    )
    .await
    .unwrap();
    let plain = cluster.connect_db("shard_plain", "shard_roles_a").await;
    let m1 = map(1, &["a", "b"]);
    expect_sqlstate(install(&plain, "a", &m1, None).await, &SqlState::INSUFFICIENT_PRIVILEGE, "install");
    for sql in [
        "SELECT dlock_shard_draining(1)::text",
        "SELECT dlock_shard_drained('b', 1)::text",
        "SELECT dlock_shard_timer('b', 1, '1 s')::text",
    ] {
        expect_sqlstate(plain.query_one(sql, &[]).await, &SqlState::INSUFFICIENT_PRIVILEGE, sql);
    }
    // The internal tables are closed; the map itself is no secret.
    expect_sqlstate(
        plain.query_one("SELECT count(*) FROM dlock_internal.shard_map", &[]).await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "shard_map",
    );
    assert_eq!(plain.query("SELECT * FROM dlock_shard_status()", &[]).await.unwrap().len(), 0);

    for (servers, me, what) in [
        (vec!["a", "a"], "a", "a name twice"),
        (vec!["a", "b c"], "a", "a bad name"),
        (Vec::new(), "a", "no server"),
        (vec!["a", "b"], "z", "a server the map does not name"),
    ] {
        let result = a.query_one("SELECT dlock_shard_install($1, 1, $2)", &[&me, &servers]).await;
        expect_sqlstate(result, &SqlState::INVALID_PARAMETER_VALUE, what);
    }
    for epoch in [0_i64, -1, 1 << 20] {
        let result = a.query_one("SELECT dlock_shard_install('a', $1, ARRAY['a'])", &[&epoch]).await;
        expect_sqlstate(result, &SqlState::INVALID_PARAMETER_VALUE, &format!("epoch {epoch}"));
    }
    expect_sqlstate(
        a.query_one("SELECT dlock_shard_install('a', 2, ARRAY['a'], 1, NULL)", &[]).await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "previous epoch without its servers",
    );
    expect_sqlstate(
        a.query_one("SELECT dlock_shard_install('a', 2, ARRAY['a', NULL])", &[]).await,
        &SqlState::NULL_VALUE_NOT_ALLOWED,
        "a NULL server",
    );
    // Installed, it keeps its name: another one is refused unless forced.
    assert!(install(&a, "a", &m1, None).await.unwrap());
    expect_sqlstate(
        install(&a, "b", &map(2, &["a", "b"]), Some(&m1)).await,
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "renamed",
    );
    // Security-restricted code (an index expression, a materialized view's refresh) run by an
    // administrator's statement gets no administrator's standing.
    a.batch_execute(
        "CREATE TABLE shard_trap (x int); \
         CREATE FUNCTION shard_trap_f(int) RETURNS int IMMUTABLE LANGUAGE sql \
           AS $$ SELECT CASE WHEN public.dlock_shard_install('a', 9, ARRAY['a']) THEN $1 ELSE $1 END $$; \
         INSERT INTO shard_trap VALUES (1)",
    )
    .await
    .unwrap();
    expect_sqlstate(
        a.batch_execute("CREATE INDEX ON shard_trap (shard_trap_f(x))").await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "an index expression",
    );
    let epoch: i64 = a.query_one("SELECT epoch FROM dlock_shard_status()", &[]).await.unwrap().get(0);
    assert_eq!(epoch, 1);
}

#[tokio::test]
async fn a_session_from_before_the_update_to_shard_tables_sees_the_map_installed_after() {
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    superuser.batch_execute("DROP DATABASE IF EXISTS shard_update WITH (FORCE)").await.unwrap();
    superuser.batch_execute("CREATE DATABASE shard_update").await.unwrap();
    let admin = cluster.connect_db("postgres", "shard_update").await;
    admin.batch_execute("CREATE EXTENSION dlock SCHEMA public VERSION '0.2.0'").await.unwrap();
    // A session that has granted under 0.2.0's tables, which have no shard map.
    let early = cluster.connect_db("postgres", "shard_update").await;
    let m1 = map(1, &["a", "b"]);
    let theirs = key_of(&m1, "b", None);
    early.try_acquire("before", "o", "1 hour").await.unwrap().expect("granted");
    admin.batch_execute("ALTER EXTENSION dlock UPDATE").await.unwrap();
    assert!(install(&admin, "a", &m1, None).await.unwrap());
    expect_sqlstate(
        early.try_acquire(&theirs, "o", "1 hour").await,
        &SqlState::L_E_INVALID_SPECIFICATION,
        "the early session's grant of another server's key",
    );
}
