//! The single-caller contract: signatures, acquire / renew / release / release_all / holds /
//! force_release, expiry and session-bound leases, seen from live sessions.

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Session, SqlState, assert_between, eventually, expect_sqlstate, key, owner};

#[tokio::test]
async fn api_has_the_contract_signatures() {
    let s = Cluster::shared().connect().await;
    let functions = [
        (
            "dlock_acquire(text,text,interval,interval)",
            "bigint",
            "key text, owner text, ttl interval, wait interval",
        ),
        ("dlock_renew(text,text,interval)", "timestamp with time zone", "key text, owner text, ttl interval"),
        ("dlock_release(text,text)", "boolean", "key text, owner text"),
        ("dlock_release_all(text)", "integer", "owner text"),
        ("dlock_holds(text,bigint)", "boolean", "key text, fence bigint"),
        ("dlock_force_release(text)", "boolean", "key text"),
        // Contract version 2.
        (
            "dlock_acquire(text,text,interval,interval,interval)",
            "bigint",
            "key text, owner text, ttl interval, wait interval, lock_delay interval",
        ),
        (
            "dlock_acquire_shared(text,text,interval,interval,integer,interval)",
            "bigint",
            "key text, owner text, ttl interval, wait interval, max_holders integer, lock_delay interval",
        ),
        (
            "dlock_acquire_all(text[],text,interval,interval,interval)",
            "bigint[]",
            "keys text[], owner text, ttl interval, wait interval, lock_delay interval",
        ),
        (
            "dlock_campaign(text,text,interval,text,interval,interval)",
            "bigint",
            "election text, candidate text, ttl interval, info text, wait interval, lock_delay interval",
        ),
        ("dlock_wait_free(text,interval)", "boolean", "key text, wait interval"),
        ("dlock_stats_reset()", "void", ""),
        (
            "dlock_leader(text)",
            "TABLE(info text, term bigint, since timestamp with time zone, expires_at timestamp with time zone)",
            "election text",
        ),
    ];
    for (signature, result, arguments) in functions {
        let row = s
            .query_one(
                "SELECT to_regprocedure($1) IS NOT NULL, \
                        pg_get_function_result(to_regprocedure($1)), \
                        pg_get_function_identity_arguments(to_regprocedure($1)), \
                        (SELECT prosecdef FROM pg_proc WHERE oid = to_regprocedure($1)), \
                        (SELECT coalesce(bool_or(c LIKE 'search_path=%'), false) \
                           FROM pg_proc, unnest(proconfig) AS c \
                          WHERE oid = to_regprocedure($1))",
                &[&signature],
            )
            .await
            .unwrap();
        assert!(row.get::<_, bool>(0), "function {signature} does not exist");
        assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some(result), "{signature} result type");
        assert_eq!(row.get::<_, Option<String>>(2).as_deref(), Some(arguments), "{signature} arguments");
        // dlock must see the role PostgreSQL says is calling (see role.rs): never SECURITY DEFINER.
        assert_eq!(row.get::<_, Option<bool>>(3), Some(false), "{signature} must run as its caller");
        // Its statements pin their own (superuser_escapes.rs); a SET clause would only cost.
        assert_eq!(row.get::<_, Option<bool>>(4), Some(false), "{signature} pins a search_path");
    }

    let columns: Vec<(String, String)> = s
        .query(
            "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
              WHERE attrelid = 'dlock_locks'::regclass AND attnum > 0 AND NOT attisdropped \
              ORDER BY attnum",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected = [
        ("key", "text"),
        ("owner", "text"),
        ("fence", "bigint"),
        ("hold_count", "integer"),
        ("acquired_at", "timestamp with time zone"),
        ("expires_at", "timestamp with time zone"),
        ("holder_pid", "integer"),
        ("holder_role", "name"),
        ("waiters", "integer"),
        ("mode", "text"),
        ("max_holders", "integer"),
        ("lock_delay", "interval"),
    ];
    let expected: Vec<(String, String)> =
        expected.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
    assert_eq!(columns, expected, "dlock_locks columns");

    // The GUC exists once the library is loaded, is superuser-only and defaults to 1 day.
    s.holds("api_has_the_contract_signatures/load", 1).await.unwrap();
    let row = s
        .query_one(
            "SELECT context, current_setting('dlock.max_ttl')::interval = '1 day'::interval \
               FROM pg_settings WHERE name = 'dlock.max_ttl'",
            &[],
        )
        .await
        .expect("dlock.max_ttl must be a known setting");
    assert_eq!(row.get::<_, String>(0), "superuser", "dlock.max_ttl context");
    assert!(row.get::<_, bool>(1), "dlock.max_ttl must default to 1 day");
}

#[tokio::test]
async fn acquire_of_a_free_key_grants_a_fence_and_shows_the_lease() {
    const T: &str = "acquire_of_a_free_key_grants_a_fence_and_shows_the_lease";
    let s = Cluster::shared().connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));

    let before = s.server_now().await.unwrap();
    let fence = s.try_acquire(&k, &o, "30s").await.unwrap().expect("a free key is granted");
    let after = s.server_now().await.unwrap();
    assert!(fence > 0, "fence must be > 0, got {fence}");

    let row = s.lease(&k).await.unwrap().expect("dlock_locks shows the lease");
    assert_eq!(row.key, k);
    assert_eq!(row.owner.as_deref(), Some(o.as_str()));
    assert_eq!(row.fence, fence);
    assert_eq!(row.hold_count, 1);
    assert_between(row.acquired_at, before, after, "acquired_at");
    let expires_at = row.expires_at.expect("a TTL lease has expires_at");
    assert_between(expires_at, before + 30.0, after + 30.0, "expires_at = now + ttl");
    assert_eq!(row.holder_pid, Some(s.pid()), "holder_pid is the acquiring backend");
    assert_eq!(row.holder_role.as_deref(), Some("postgres"));
    assert_eq!(row.waiters, 0);

    assert!(s.holds(&k, fence).await.unwrap(), "holds(key, its fence)");
    assert!(!s.holds(&k, fence + 1).await.unwrap(), "holds(key, another fence)");
    assert!(!s.holds(&key(T, "unknown"), fence).await.unwrap(), "holds(unknown key)");

    assert!(s.release(&k, &o).await.unwrap(), "the holder releases");
    assert_eq!(s.lease(&k).await.unwrap(), None, "released key leaves dlock_locks");
    assert!(!s.holds(&k, fence).await.unwrap(), "holds after release");
    assert!(!s.release(&k, &o).await.unwrap(), "a second release answers false");
    assert!(!s.release(&key(T, "unknown"), &o).await.unwrap(), "release of an unknown key");
}

#[tokio::test]
async fn acquire_of_a_held_key_without_wait_returns_null_and_changes_nothing() {
    const T: &str = "acquire_of_a_held_key_without_wait_returns_null_and_changes_nothing";
    let cluster = Cluster::shared();
    let (holder, other) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let fence = holder.try_acquire(&k, &owner(T, "holder"), "30s").await.unwrap().unwrap();
    let before = holder.lease(&k).await.unwrap().unwrap();

    let start = Instant::now();
    assert_eq!(other.try_acquire(&k, &owner(T, "other"), "30s").await.unwrap(), None);
    assert_eq!(
        other.acquire_default_wait(&k, &owner(T, "other"), Some("30s")).await.unwrap(),
        None,
        "the default wait is 0"
    );
    assert!(start.elapsed() < Duration::from_secs(1), "tries of a held key return at once");

    assert_eq!(holder.lease(&k).await.unwrap(), Some(before), "the lease is unchanged");
    assert!(holder.holds(&k, fence).await.unwrap());
}

#[tokio::test]
async fn renew_sets_expiry_from_now_and_keeps_fence_and_hold_count() {
    const T: &str = "renew_sets_expiry_from_now_and_keeps_fence_and_hold_count";
    let cluster = Cluster::shared();
    let (s, other) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = s.try_acquire(&k, &o, "10s").await.unwrap().unwrap();

    let before = s.server_now().await.unwrap();
    let expires = s.renew(&k, &o, Some("60s")).await.unwrap().expect("the holder renews");
    let after = s.server_now().await.unwrap();
    assert_between(expires, before + 60.0, after + 60.0, "renew returns now + ttl");
    let row = s.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.fence, row.hold_count), (fence, 1), "fence and hold_count unchanged");
    assert_eq!(row.expires_at, Some(expires), "dlock_locks shows the renewed expiry");

    // A shorter ttl shortens the lease: expires_at = now + ttl, not greatest().
    let before = s.server_now().await.unwrap();
    let shorter = s.renew(&k, &o, Some("5s")).await.unwrap().unwrap();
    let after = s.server_now().await.unwrap();
    assert_between(shorter, before + 5.0, after + 5.0, "renew with a shorter ttl");

    let row = s.lease(&k).await.unwrap().unwrap();
    assert_eq!(other.renew(&k, &owner(T, "other"), Some("60s")).await.unwrap(), None);
    assert_eq!(other.renew(&key(T, "unknown"), &o, Some("60s")).await.unwrap(), None);
    assert_eq!(s.lease(&k).await.unwrap(), Some(row), "a refused renew changes nothing");
    assert!(s.release(&k, &o).await.unwrap());
}

#[tokio::test]
async fn release_by_another_owner_is_refused() {
    const T: &str = "release_by_another_owner_is_refused";
    let cluster = Cluster::shared();
    let (holder, other) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let fence = holder.try_acquire(&k, &owner(T, "holder"), "30s").await.unwrap().unwrap();
    let before = holder.lease(&k).await.unwrap().unwrap();

    assert!(!other.release(&k, &owner(T, "other")).await.unwrap());
    assert!(!holder.release(&k, &owner(T, "other")).await.unwrap(), "even from the holder's session");
    assert_eq!(other.release_all(&owner(T, "other")).await.unwrap(), 0);
    assert_eq!(holder.lease(&k).await.unwrap(), Some(before), "the lease is unchanged");
    assert!(other.holds(&k, fence).await.unwrap());
}

#[tokio::test]
async fn release_all_frees_every_key_of_the_owner() {
    const T: &str = "release_all_frees_every_key_of_the_owner";
    let cluster = Cluster::shared();
    let (s, other) = (cluster.connect().await, cluster.connect().await);
    let o = owner(T, "o");
    let keys = [key(T, "k1"), key(T, "k2"), key(T, "k3")];
    for k in &keys {
        s.try_acquire(k, &o, "30s").await.unwrap().unwrap();
    }
    s.try_acquire(&keys[0], &o, "30s").await.unwrap().unwrap(); // a second hold on k1
    let bystander = key(T, "bystander");
    other.try_acquire(&bystander, &owner(T, "other"), "30s").await.unwrap().unwrap();

    assert_eq!(s.release_all(&o).await.unwrap(), 3, "release_all counts keys, not holds");
    for k in &keys {
        assert_eq!(s.lease(k).await.unwrap(), None, "{k} is free");
        assert!(other.try_acquire(k, &owner(T, "other"), "30s").await.unwrap().is_some());
    }
    assert!(s.lease(&bystander).await.unwrap().is_some(), "another owner's lease stays");
    assert_eq!(s.release_all(&o).await.unwrap(), 0, "nothing left to free");
    assert_eq!(other.release_all(&owner(T, "other")).await.unwrap(), 4);
}

#[tokio::test]
async fn expired_lease_is_free_and_its_owner_can_no_longer_renew_or_release() {
    const T: &str = "expired_lease_is_free_and_its_owner_can_no_longer_renew_or_release";
    let cluster = Cluster::shared();
    let (s, other) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = s.try_acquire(&k, &o, "200ms").await.unwrap().unwrap();
    let expires_at = s.lease(&k).await.unwrap().unwrap().expires_at.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(s.server_now().await.unwrap() > expires_at, "the lease has expired");

    assert_eq!(s.lease(&k).await.unwrap(), None, "dlock_locks shows only live leases");
    assert!(!s.holds(&k, fence).await.unwrap(), "holds on an expired lease");
    assert_eq!(s.renew(&k, &o, Some("30s")).await.unwrap(), None, "renew after expiry");
    assert!(!s.release(&k, &o).await.unwrap(), "release after expiry");
    let next = other.try_acquire(&k, &owner(T, "other"), "30s").await.unwrap();
    assert!(next.is_some_and(|f| f > fence), "next acquirer gets a larger fence: {next:?} vs {fence}");
    assert!(!s.release(&k, &o).await.unwrap());
    assert!(other.release(&k, &owner(T, "other")).await.unwrap());
}

#[tokio::test]
async fn session_bound_lease_renews_to_infinity_and_ends_with_its_session() {
    const T: &str = "session_bound_lease_renews_to_infinity_and_ends_with_its_session";
    let cluster = Cluster::shared();
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = holder.acquire(&k, &o, None, Some("0")).await.unwrap().expect("granted");
    assert_eq!(
        holder.renew(&k, &o, Some("10s")).await.unwrap(),
        Some(f64::INFINITY),
        "renew of a session-bound lease answers 'infinity'"
    );
    let row = observer.lease(&k).await.unwrap().expect("a session-bound lease is listed");
    assert_eq!((row.fence, row.hold_count), (fence, 1));
    assert_eq!(row.holder_pid, Some(holder.pid()));

    drop(holder);
    eventually(Duration::from_secs(3), "session-bound lease ends with its session", || {
        let (observer, k) = (&observer, &k);
        async move { observer.lease(k).await.unwrap().is_none() }
    })
    .await;
    assert!(!observer.holds(&k, fence).await.unwrap());
    let next = observer.try_acquire(&k, &owner(T, "next"), "30s").await.unwrap();
    assert!(next.is_some_and(|f| f > fence), "next grant {next:?} after {fence}");
}

#[tokio::test]
async fn session_bound_lease_ends_when_released() {
    const T: &str = "session_bound_lease_ends_when_released";
    let cluster = Cluster::shared();
    let (holder, other) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = holder.acquire(&k, &o, None, Some("0")).await.unwrap().unwrap();
    assert_eq!(holder.acquire(&k, &o, None, Some("0")).await.unwrap(), Some(fence));
    assert!(holder.release(&k, &o).await.unwrap());
    assert_eq!(other.try_acquire(&k, &owner(T, "other"), "30s").await.unwrap(), None);
    assert!(holder.release(&k, &o).await.unwrap());
    assert_eq!(holder.lease(&k).await.unwrap(), None, "hold count 0 ends it");
    assert!(other.try_acquire(&k, &owner(T, "other"), "30s").await.unwrap().is_some());
}

#[tokio::test]
async fn force_release_frees_the_key_whatever_the_owner() {
    const T: &str = "force_release_frees_the_key_whatever_the_owner";
    let cluster = Cluster::shared();
    let (holder, admin) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    assert!(admin.force_release(&k).await.unwrap(), "a superuser force-releases");
    assert_eq!(admin.lease(&k).await.unwrap(), None, "all holds are gone");
    assert!(!admin.holds(&k, fence).await.unwrap());
    assert_eq!(holder.renew(&k, &o, Some("30s")).await.unwrap(), None);
    assert!(!holder.release(&k, &o).await.unwrap());
    assert!(!admin.force_release(&k).await.unwrap(), "force release of a free key");
    assert!(!admin.force_release(&key(T, "unknown")).await.unwrap());
}

/// SET is per session: the other tests of this binary never see these values. The values are
/// written so they parse both as an interval and as a time-unit setting (`48h`, `1min`).
#[tokio::test]
async fn max_ttl_bounds_ttl_and_only_a_superuser_may_change_it() {
    const T: &str = "max_ttl_bounds_ttl_and_only_a_superuser_may_change_it";
    let cluster = Cluster::shared();
    let admin = cluster.connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    admin.holds(&k, 1).await.unwrap(); // loads the library, so the setting is defined

    admin.batch_execute("SET dlock.max_ttl = '48h'").await.unwrap();
    let granted = admin.try_acquire(&k, &o, "36 hours").await.unwrap();
    assert!(granted.is_some(), "ttl under a raised max_ttl");
    assert!(admin.renew(&k, &o, Some("47 hours")).await.unwrap().is_some());
    assert!(admin.release(&k, &o).await.unwrap());
    admin.batch_execute("SET dlock.max_ttl = '1min'").await.unwrap();
    expect_sqlstate(
        admin.try_acquire(&k, &o, "2 minutes").await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "ttl over a lowered max_ttl",
    );
    let granted = admin.try_acquire(&k, &o, "1 minute").await.unwrap();
    assert!(granted.is_some(), "ttl = max_ttl is allowed");
    assert!(admin.release(&k, &o).await.unwrap());
    admin.batch_execute("RESET dlock.max_ttl").await.unwrap();

    admin.batch_execute("CREATE ROLE max_ttl_user LOGIN").await.unwrap();
    let user: Session = cluster.connect_as("max_ttl_user").await;
    user.holds(&k, 1).await.unwrap();
    expect_sqlstate(
        user.batch_execute("SET dlock.max_ttl = '48h'").await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "a non-superuser SET dlock.max_ttl",
    );
    expect_sqlstate(
        user.try_acquire(&k, &o, "2 days").await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "ttl over the default max_ttl",
    );
}

/// The contract types dlock.max_ttl as an interval: interval syntax must be accepted.
#[tokio::test]
async fn max_ttl_accepts_interval_syntax() {
    const T: &str = "max_ttl_accepts_interval_syntax";
    let admin = Cluster::shared().connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    admin.holds(&k, 1).await.unwrap(); // loads the library, so the setting is defined
    for (setting, ttl) in [("2 days", "36 hours"), ("1 day 12:00:00", "30 hours"), ("90 minutes", "80 min")] {
        let set = admin.batch_execute(&format!("SET dlock.max_ttl = '{setting}'")).await;
        assert!(set.is_ok(), "SET dlock.max_ttl = '{setting}': {:?}", set.err());
        let granted = admin.try_acquire(&k, &o, ttl).await.unwrap();
        assert!(granted.is_some(), "ttl {ttl} under max_ttl {setting}");
        assert!(admin.release(&k, &o).await.unwrap());
    }
    admin.batch_execute("RESET dlock.max_ttl").await.unwrap();
}
