//! Fast mode (`dlock_fast_*`, preloaded only): leases in shared memory, no WAL. The rules of
//! a lease hold as for durable ones (one holder, owner and role checks, reentry, server-clock
//! expiry, renew); calls are not transactional; waiters wake on release and at expiry; keys
//! belong to their database; bad input is refused. Across a crash or restart, the lock-delay
//! (no fast key granted for `dlock.fast_max_ttl` after start) and the fence epochs keep
//! exclusion and fence order (the fault tests at the end, each on a cluster of its own).

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, NoTls, Session, SqlState, eventually, expect_sqlstate, key, owner, within};

/// The lock-delay of the fast test clusters, and so their longest fast ttl.
const MAX_TTL_S: u64 = 2;
const PRELOAD: &str = "shared_preload_libraries = 'dlock'";
const MAX_TTL: &str = "dlock.fast_max_ttl = 2";

fn fast_cluster() -> &'static Cluster {
    Cluster::shared_named("fast", &[PRELOAD, MAX_TTL])
}

async fn acquire(
    s: &Session,
    key: &str,
    owner: &str,
    ttl: &str,
    wait: &str,
) -> Result<Option<i64>, tokio_postgres::Error> {
    s.query_one(
        "SELECT dlock_fast_acquire($1, $2, $3::text::interval, $4::text::interval)",
        &[&key, &owner, &ttl, &wait],
    )
    .await
    .map(|r| r.get(0))
}

async fn release(s: &Session, key: &str, owner: &str) -> Result<bool, tokio_postgres::Error> {
    s.query_one("SELECT dlock_fast_release($1, $2)", &[&key, &owner]).await.map(|r| r.get(0))
}

async fn renew(s: &Session, key: &str, owner: &str, ttl: &str) -> Result<Option<f64>, tokio_postgres::Error> {
    s.query_one(
        "SELECT extract(epoch FROM dlock_fast_renew($1, $2, $3::text::interval) - clock_timestamp())::float8",
        &[&key, &owner, &ttl],
    )
    .await
    .map(|r| r.get(0))
}

/// (owner, fence, hold_count) of the live fast lease on `key`, as `dlock_fast_locks` shows it.
async fn shown(s: &Session, key: &str) -> Option<(Option<String>, i64, i32)> {
    s.query_opt("SELECT owner, fence, hold_count FROM dlock_fast_locks() WHERE key = $1", &[&key])
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
}

/// Waits out the lock-delay after the cluster's start: until a probe key is granted.
async fn past_lock_delay(cluster: &Cluster) -> Session {
    let s = cluster.connect().await;
    let (k, o) = (key("fast", "probe"), owner("fast", "probe"));
    let deadline = Instant::now() + Duration::from_secs(MAX_TTL_S + 10);
    while acquire(&s, &k, &o, "1s", "0").await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "the lock-delay never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(release(&s, &k, &o).await.unwrap());
    s
}

#[tokio::test]
async fn one_holder_reentry_and_release_by_its_owner_only() {
    const T: &str = "one_holder_reentry_and_release_by_its_owner_only";
    let cluster = fast_cluster();
    let s = past_lock_delay(cluster).await;
    let other = cluster.connect().await;
    let (k, a, b) = (key(T, "k"), owner(T, "a"), owner(T, "b"));

    let fence = acquire(&s, &k, &a, "2s", "0").await.unwrap().expect("a free key is granted");
    assert_eq!(acquire(&other, &k, &b, "2s", "0").await.unwrap(), None, "another owner is refused");
    assert_eq!(acquire(&other, &k, &a, "2s", "0").await.unwrap(), Some(fence), "the owner reenters");
    assert_eq!(shown(&s, &k).await, Some((Some(a.clone()), fence, 2)));
    let holds = |fence: i64| {
        let (other, k) = (&other, &k);
        async move {
            other.query_one("SELECT dlock_fast_holds($1, $2)", &[k, &fence]).await.unwrap().get::<_, bool>(0)
        }
    };
    assert!(holds(fence).await && !holds(fence + 1).await, "dlock_fast_holds checks the fence");
    assert!(!release(&other, &k, &b).await.unwrap(), "another owner cannot release it");
    assert!(release(&s, &k, &a).await.unwrap());
    assert_eq!(acquire(&other, &k, &b, "2s", "0").await.unwrap(), None, "one hold is left");
    assert!(release(&s, &k, &a).await.unwrap());
    assert!(!release(&s, &k, &a).await.unwrap(), "nothing left to release");
    assert_eq!(shown(&s, &k).await, None);
    assert!(!holds(fence).await, "a released fence is not held");
    let next = acquire(&other, &k, &b, "2s", "0").await.unwrap().expect("free again");
    assert!(next > fence, "fences grow: {next} after {fence}");
    assert!(release(&other, &k, &b).await.unwrap());
}

#[tokio::test]
async fn a_lease_expires_on_the_server_clock_unless_renewed() {
    const T: &str = "a_lease_expires_on_the_server_clock_unless_renewed";
    let cluster = fast_cluster();
    let s = past_lock_delay(cluster).await;
    let (k, a, b) = (key(T, "k"), owner(T, "a"), owner(T, "b"));

    acquire(&s, &k, &a, "1s", "0").await.unwrap().unwrap();
    let left = renew(&s, &k, &a, "2s").await.unwrap().expect("the holder renews");
    assert!(left > 1.9 && left <= 2.0, "renewed to 2 s from now: {left}");
    assert_eq!(renew(&s, &k, &b, "2s").await.unwrap(), None, "another owner cannot renew");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(acquire(&s, &k, &b, "1s", "0").await.unwrap(), None, "the renewal outlived the first ttl");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(acquire(&s, &k, &b, "1s", "0").await.unwrap().is_some(), "expired, so free");
    assert_eq!(renew(&s, &k, &a, "1s").await.unwrap(), None, "the old holder lost it");
}

#[tokio::test]
async fn a_waiter_wakes_on_release_and_at_expiry() {
    const T: &str = "a_waiter_wakes_on_release_and_at_expiry";
    let cluster = fast_cluster();
    let holder = past_lock_delay(cluster).await;
    let (k, a) = (key(T, "k"), owner(T, "a"));

    // Released after 300 ms: the waiter is granted long before the lease's 2 s would end —
    // also after another waiter on the key was cancelled (it leaves no trace behind).
    let held = acquire(&holder, &k, &a, "2s", "0").await.unwrap().unwrap();
    let cancelled = cluster.connect().await;
    let token = cancelled.cancel_token();
    let k1 = k.clone();
    let gone = tokio::spawn(async move { acquire(&cancelled, &k1, "gone", "2s", "5s").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    token.cancel_query(NoTls).await.unwrap();
    let gone = within(Duration::from_secs(5), "cancelled waiter", gone).await.unwrap();
    expect_sqlstate(gone, &SqlState::QUERY_CANCELED, "a cancelled fast wait");
    let waiter = cluster.connect().await;
    let (k2, b) = (k.clone(), owner(T, "b"));
    let task = tokio::spawn(async move {
        let fence = acquire(&waiter, &k2, &b, "2s", "5s").await;
        (fence, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert!(release(&holder, &k, &a).await.unwrap());
    let (fence, granted_at) = within(Duration::from_secs(5), "waiter", task).await.unwrap();
    let fence = fence.unwrap().expect("the waiter is granted");
    assert!(fence > held);
    let lag = granted_at.duration_since(released_at);
    assert!(lag < Duration::from_millis(1000), "woken by the release, not the expiry: {lag:?}");

    // Never released: the waiter is granted when the 1 s lease runs out.
    let (k, a) = (key(T, "expiring"), owner(T, "a"));
    acquire(&holder, &k, &a, "1s", "0").await.unwrap().unwrap();
    let started = Instant::now();
    let fence = acquire(&cluster.connect().await, &k, &owner(T, "c"), "1s", "5s").await.unwrap();
    assert!(fence.is_some(), "granted at the expiry");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(1600),
        "waited {waited:?}"
    );

    // A wait that runs out answers NULL.
    let (k, a) = (key(T, "busy"), owner(T, "a"));
    acquire(&holder, &k, &a, "2s", "0").await.unwrap().unwrap();
    assert_eq!(acquire(&cluster.connect().await, &k, &owner(T, "d"), "1s", "200ms").await.unwrap(), None);
}

#[tokio::test]
async fn calls_take_effect_at_once_whatever_the_transaction_does() {
    const T: &str = "calls_take_effect_at_once_whatever_the_transaction_does";
    let cluster = fast_cluster();
    let s = past_lock_delay(cluster).await;
    let other = cluster.connect().await;
    let (k, a) = (key(T, "k"), owner(T, "a"));
    s.batch_execute("BEGIN").await.unwrap();
    let fence = acquire(&s, &k, &a, "2s", "0").await.unwrap().unwrap();
    assert_eq!(shown(&other, &k).await.map(|r| r.1), Some(fence), "visible before the commit");
    s.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(shown(&other, &k).await.map(|r| r.1), Some(fence), "a rollback does not undo it");
    assert!(release(&s, &k, &a).await.unwrap());
}

#[tokio::test]
async fn a_lease_belongs_to_its_role_and_its_database() {
    const T: &str = "a_lease_belongs_to_its_role_and_its_database";
    let cluster = fast_cluster();
    let superuser = past_lock_delay(cluster).await;
    for role in ["fast_r1", "fast_r2"] {
        superuser.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    }
    let (r1, r2) = (cluster.connect_as("fast_r1").await, cluster.connect_as("fast_r2").await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = acquire(&r1, &k, &o, "2s", "0").await.unwrap().unwrap();
    expect_sqlstate(release(&r2, &k, &o).await, &SqlState::INSUFFICIENT_PRIVILEGE, "release by r2");
    expect_sqlstate(renew(&r2, &k, &o, "1s").await, &SqlState::INSUFFICIENT_PRIVILEGE, "renew by r2");
    assert_eq!(shown(&r2, &k).await, Some((None, fence, 1)), "r2 sees the key, not its owner");
    assert_eq!(shown(&superuser, &k).await, Some((Some(o.clone()), fence, 1)), "a superuser sees the owner");

    // The same key in another database is another lock.
    superuser.batch_execute("CREATE DATABASE fast_other").await.unwrap();
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(cluster.port()).user("postgres").dbname("fast_other");
    let (other_db, connection) = config.connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    other_db.batch_execute("CREATE EXTENSION dlock SCHEMA public").await.unwrap();
    let there: Option<i64> = other_db
        .query_one("SELECT dlock_fast_acquire($1, $2, '2s')", &[&k, &owner(T, "elsewhere")])
        .await
        .unwrap()
        .get(0);
    assert!(there.is_some(), "granted in the other database");
    assert!(release(&r1, &k, &o).await.unwrap());
}

#[tokio::test]
async fn bad_input_is_refused_with_its_sqlstate() {
    const T: &str = "bad_input_is_refused_with_its_sqlstate";
    let s = past_lock_delay(fast_cluster()).await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let bad = SqlState::INVALID_PARAMETER_VALUE;
    let acquire_raw = |key: Option<String>,
                       owner: Option<String>,
                       ttl: Option<&'static str>,
                       wait: Option<&'static str>| {
        let s = &s;
        async move {
            s.query_one(
                "SELECT dlock_fast_acquire($1, $2, $3::text::interval, coalesce($4::text::interval, '0'))",
                &[&key, &owner, &ttl, &wait],
            )
            .await
            .map(|r| r.get::<_, Option<i64>>(0))
        }
    };
    let null = SqlState::NULL_VALUE_NOT_ALLOWED;
    expect_sqlstate(acquire_raw(None, Some(o.clone()), Some("1s"), None).await, &null, "NULL key");
    expect_sqlstate(acquire_raw(Some(k.clone()), None, Some("1s"), None).await, &null, "NULL owner");
    expect_sqlstate(acquire_raw(Some(k.clone()), Some(o.clone()), None, None).await, &null, "NULL ttl");
    expect_sqlstate(
        acquire_raw(Some(String::new()), Some(o.clone()), Some("1s"), None).await,
        &bad,
        "empty key",
    );
    expect_sqlstate(
        acquire_raw(Some("k".repeat(257)), Some(o.clone()), Some("1s"), None).await,
        &bad,
        "long key",
    );
    expect_sqlstate(
        acquire_raw(Some(k.clone()), Some("o".repeat(129)), Some("1s"), None).await,
        &bad,
        "long owner",
    );
    expect_sqlstate(acquire_raw(Some(k.clone()), Some(o.clone()), Some("0s"), None).await, &bad, "zero ttl");
    expect_sqlstate(
        acquire_raw(Some(k.clone()), Some(o.clone()), Some("-1s"), None).await,
        &bad,
        "negative ttl",
    );
    let above = acquire_raw(Some(k.clone()), Some(o.clone()), Some("3s"), None).await;
    let message = above.as_ref().err().and_then(|e| e.as_db_error()).map(|e| e.message().to_string());
    expect_sqlstate(above, &bad, "ttl above dlock.fast_max_ttl");
    assert!(message.unwrap().contains("dlock.fast_max_ttl"), "the message names the setting");
    expect_sqlstate(
        acquire_raw(Some(k.clone()), Some(o.clone()), Some("1s"), Some("-1s")).await,
        &bad,
        "negative wait",
    );
    expect_sqlstate(renew(&s, &k, &o, "3s").await, &bad, "renew above the max");
    let none: Option<String> = None;
    let released =
        s.query_one("SELECT dlock_fast_release($1, $2)", &[&none, &o]).await.map(|r| r.get::<_, bool>(0));
    expect_sqlstate(released, &null, "release of a NULL key");
    assert_eq!(shown(&s, &k).await, None, "nothing was taken");
    // 256 bytes is still a key.
    let longest = "k".repeat(256);
    assert!(acquire(&s, &longest, &o, "1s", "0").await.unwrap().is_some());
    assert!(release(&s, &longest, &o).await.unwrap());
}

#[tokio::test]
async fn without_preload_fast_mode_says_what_it_needs() {
    let s = Cluster::shared().connect().await;
    let refused = acquire(&s, "k", "o", "1s", "0").await;
    let hint =
        refused.as_ref().err().and_then(|e| e.as_db_error()).and_then(|e| e.hint()).map(str::to_string);
    expect_sqlstate(refused, &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, "fast acquire without preload");
    assert!(hint.unwrap().contains("shared_preload_libraries"));
}

#[tokio::test]
async fn a_full_table_refuses_new_keys_until_expired_ones_are_cleared() {
    const T: &str = "a_full_table_refuses_new_keys_until_expired_ones_are_cleared";
    let cluster = Cluster::shared_named(
        "fast-small",
        &[
            PRELOAD,
            MAX_TTL,
            "dlock.fast_max_leases = 4",
            "dlock.fast_max_leases_per_role = 4",
            "dlock.fast_max_leases_per_database = 4",
        ],
    );
    let s = past_lock_delay(cluster).await;
    let o = owner(T, "o");
    for i in 0..4 {
        assert!(acquire(&s, &key(T, &i.to_string()), &o, "1s", "0").await.unwrap().is_some());
    }
    let full = acquire(&s, &key(T, "fifth"), &o, "1s", "0").await;
    expect_sqlstate(full, &SqlState::CONFIGURATION_LIMIT_EXCEEDED, "a fifth key");
    // A held key can still be reentered.
    assert!(acquire(&s, &key(T, "0"), &o, "1s", "0").await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        acquire(&s, &key(T, "fifth"), &o, "1s", "0").await.unwrap().is_some(),
        "expired leases make room"
    );
}

// ---------------------------------------------------------------------------------------------
// Faults: each test crashes a cluster of its own.

/// After the server comes back: no fast lease survived, no fast key is granted before the
/// lock-delay ends (so every lease granted before the fault, at `last_grant` at the latest, ran
/// out first), and then fences continue above every fence handed out before.
async fn comes_back_safely(cluster: &Cluster, test: &str, highest: i64, last_grant: Instant) {
    let s = cluster.connect().await;
    let (k, o) = (key(test, "after"), owner(test, "after"));
    assert_eq!(shown(&s, &key(test, "held")).await, None, "fast leases live in memory only");
    assert_eq!(acquire(&s, &k, &o, "1s", "0").await.unwrap(), None, "held back by the lock-delay");
    let fence =
        acquire(&s, &k, &o, "1s", &format!("{}s", MAX_TTL_S + 5)).await.unwrap().expect("granted after it");
    let waited = last_grant.elapsed();
    assert!(
        waited >= Duration::from_secs(MAX_TTL_S),
        "granted {waited:?} after the last grant before the fault"
    );
    assert!(fence > highest, "fences keep growing: {fence} after {highest}");
}

/// Takes 20 fences, the last one held; returns the highest.
async fn hand_out_fences(s: &Session, test: &str) -> i64 {
    let (k, o) = (key(test, "held"), owner(test, "o"));
    let mut highest = 0;
    for _ in 0..20 {
        highest = highest.max(acquire(s, &k, &o, "2s", "0").await.unwrap().unwrap());
        assert!(release(s, &k, &o).await.unwrap());
    }
    highest.max(acquire(s, &k, &o, "2s", "0").await.unwrap().unwrap())
}

#[tokio::test]
async fn a_crash_restart_holds_fast_keys_back_and_fences_keep_growing() {
    const T: &str = "a_crash_restart_holds_fast_keys_back_and_fences_keep_growing";
    let cluster = Cluster::start_new("fast-crash", &[PRELOAD, MAX_TTL]);
    let s = past_lock_delay(&cluster).await;
    let highest = hand_out_fences(&s, T).await;
    let last_grant = Instant::now();

    // A backend killed by SIGKILL makes the postmaster reset shared memory (a crash restart).
    let victim = cluster.connect().await;
    let sent =
        std::process::Command::new("kill").args(["-KILL", &victim.pid().to_string()]).status().unwrap();
    assert!(sent.success());
    // A probe could connect before the postmaster has even reaped the victim; the crash restart
    // has happened once it ended every other session, `s` among them.
    eventually(Duration::from_secs(30), "the crash restart ends the other sessions", || async {
        s.client().query_one("SELECT 1", &[]).await.is_err()
    })
    .await;
    eventually(Duration::from_secs(30), "the server is back after the crash restart", || async {
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(cluster.port()).user("postgres").dbname("postgres");
        match config.connect(NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                client.query_one("SELECT 1", &[]).await.is_ok()
            }
            Err(_) => false,
        }
    })
    .await;
    comes_back_safely(&cluster, T, highest, last_grant).await;
}

#[tokio::test]
async fn an_immediate_restart_holds_fast_keys_back_and_fences_keep_growing() {
    const T: &str = "an_immediate_restart_holds_fast_keys_back_and_fences_keep_growing";
    let cluster = Cluster::start_new("fast-restart", &[PRELOAD, MAX_TTL]);
    let s = past_lock_delay(&cluster).await;
    let highest = hand_out_fences(&s, T).await;
    let last_grant = Instant::now();
    cluster.stop("immediate");
    cluster.start();
    comes_back_safely(&cluster, T, highest, last_grant).await;
}

/// A fast acquire-and-release of `key` in `db`, as `owner`: the fence.
async fn fence_in(cluster: &Cluster, db: &str, key: &str) -> i64 {
    let s = cluster.connect_db("postgres", db).await;
    let fence = acquire(&s, key, "o", "1s", &format!("{}s", MAX_TTL_S + 5)).await.unwrap().expect("granted");
    assert!(release(&s, key, "o").await.unwrap());
    fence
}

#[tokio::test]
async fn fences_of_a_key_grow_across_databases_restarts_and_used_up_epochs() {
    let cluster = Cluster::start_new("fast-epochs", &[PRELOAD, MAX_TTL]);
    let s = past_lock_delay(&cluster).await;
    s.batch_execute("CREATE DATABASE epochs_b").await.unwrap();
    cluster
        .connect_db("postgres", "epochs_b")
        .await
        .batch_execute("CREATE EXTENSION dlock SCHEMA public")
        .await
        .unwrap();
    // Database A has handed out many more durable fences than B (0.1.0 drew fast epochs from
    // the database's own fence sequence, so B's were lower).
    s.batch_execute("SELECT count(dlock_acquire('a' || g, 'o', '1 hour')) FROM generate_series(1, 3000) g")
        .await
        .unwrap();
    let mut fences = vec![fence_in(&cluster, "postgres", "k").await];

    // After a restart B draws the first epoch; A's key must still go up.
    cluster.stop("fast");
    cluster.start();
    fences.push(fence_in(&cluster, "epochs_b", "other").await);
    fences.push(fence_in(&cluster, "postgres", "k").await);

    // B uses up an epoch's 2^20 fences; A's next fence comes from the next epoch, above.
    let b = cluster.connect_db("postgres", "epochs_b").await;
    b.batch_execute(
        "SELECT count(*) FROM generate_series(1, 1050000) g, \
           LATERAL (SELECT dlock_fast_acquire('churn' || left(g::text, 0), 'o', '1 second'), \
                           dlock_fast_release('churn' || left(g::text, 0), 'o')) x",
    )
    .await
    .unwrap();
    fences.push(fence_in(&cluster, "postgres", "k").await);

    // A crash, and B first again.
    cluster.stop("immediate");
    cluster.start();
    fences.push(fence_in(&cluster, "epochs_b", "other").await);
    fences.push(fence_in(&cluster, "postgres", "k").await);

    let key_fences: Vec<i64> = [0, 2, 3, 5].iter().map(|&i| fences[i]).collect();
    assert!(key_fences.windows(2).all(|w| w[1] > w[0]), "fences of k must only grow: {key_fences:?}");
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "and so must every fence drawn after another: {fences:?}"
    );
    assert!(fences[3] >> 20 > fences[2] >> 20, "the used-up epoch was followed by a new one: {fences:?}");
}

#[tokio::test]
async fn one_role_or_database_cannot_take_the_table_from_the_others() {
    let cluster = Cluster::shared_named(
        "fast-shares",
        &[
            PRELOAD,
            "dlock.fast_max_ttl = 5",
            "dlock.fast_max_leases = 64",
            "dlock.fast_max_leases_per_role = 20",
            "dlock.fast_max_leases_per_database = 30",
        ],
    );
    let superuser = past_lock_delay(cluster).await;
    superuser
        .batch_execute("CREATE ROLE share_a LOGIN; CREATE ROLE share_b LOGIN; CREATE ROLE share_c LOGIN")
        .await
        .unwrap();
    superuser.batch_execute("CREATE DATABASE shares_b").await.unwrap();
    cluster
        .connect_db("postgres", "shares_b")
        .await
        .batch_execute("CREATE EXTENSION dlock SCHEMA public")
        .await
        .unwrap();
    let take = |s: &'static Session, prefix: &'static str, n: usize, ttl: &'static str| async move {
        for i in 0..n {
            let k = format!("{prefix}{i}");
            assert!(acquire(s, &k, "o", ttl, "0").await.unwrap().is_some(), "{prefix}: key {i} is granted");
        }
    };
    let leak = |s: Session| -> &'static Session { Box::leak(Box::new(s)) };

    // Role A in database postgres takes its share, then is refused.
    let a = leak(cluster.connect_as("share_a").await);
    take(a, "a", 20, "1s").await;
    let refused = acquire(a, "a-more", "o", "1s", "0").await;
    let message = refused.as_ref().err().and_then(|e| e.as_db_error()).map(|e| e.message().to_string());
    expect_sqlstate(refused, &SqlState::CONFIGURATION_LIMIT_EXCEEDED, "role A past its share");
    assert!(message.unwrap().contains("dlock.fast_max_leases_per_role = 20"));
    assert!(acquire(a, "a0", "o", "1s", "0").await.unwrap().is_some(), "its held keys reenter");

    // Meanwhile role B in another database takes its own share.
    let b = leak(cluster.connect_db("share_b", "shares_b").await);
    take(b, "b", 20, "5s").await;

    // Role C in A's database runs into the database's share (30) before its own.
    let c = leak(cluster.connect_as("share_c").await);
    take(c, "c", 10, "5s").await;
    let refused = acquire(c, "c-more", "o", "5s", "0").await;
    let message = refused.as_ref().err().and_then(|e| e.as_db_error()).map(|e| e.message().to_string());
    expect_sqlstate(refused, &SqlState::CONFIGURATION_LIMIT_EXCEEDED, "database postgres past its share");
    assert!(message.unwrap().contains("dlock.fast_max_leases_per_database = 30"));

    // A release gives the share back at once; expired leases give it back when swept.
    assert!(release(a, "a1", "o").await.unwrap());
    assert!(acquire(c, "c-more", "o", "5s", "0").await.unwrap().is_some(), "A's release made room");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    take(a, "a-again", 19, "5s").await;
    let refused = acquire(a, "a-last", "o", "5s", "0").await;
    expect_sqlstate(refused, &SqlState::CONFIGURATION_LIMIT_EXCEEDED, "database postgres at its share again");

    // The shares are SIGHUP settings.
    superuser.batch_execute("ALTER SYSTEM SET dlock.fast_max_leases_per_database = 40").await.unwrap();
    superuser.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    eventually(Duration::from_secs(5), "the new share applies", || async {
        acquire(a, "a-last", "o", "5s", "0").await.is_ok_and(|f| f.is_some())
    })
    .await;
}
