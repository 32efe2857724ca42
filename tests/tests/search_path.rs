//! The functions pin their search_path: objects a caller puts on its search_path (in public
//! and pg_temp) that are named like what the functions might use are never used, and every
//! call behaves as with the default search_path.
//!
//! A binary of its own: the shadow objects in `public` must not disturb other tests.

use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, expect_sqlstate, finish, key, owner, wait_for_waiters};

/// Objects in `public` that log to `public.shadow_log` and answer wrongly when invoked (in
/// place of the hostile-schema net's traps of the same names, under `make test-hostile`).
const PUBLIC_SHADOWS: &str = r#"
CREATE TABLE public.shadow_log (what text NOT NULL);
CREATE TABLE public.lease (key text, owner text, fence bigint, hold_count integer,
                           expires_at timestamptz);
CREATE TABLE public.dlock_lease (key text, owner text, fence bigint);
CREATE SEQUENCE public.fence_seq;

CREATE OR REPLACE FUNCTION public.shadow(what text) RETURNS void LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.shadow_log VALUES (what); END$$;

CREATE OR REPLACE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.now()'); RETURN '2000-01-01'; END$$;
CREATE OR REPLACE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.clock_timestamp()'); RETURN '2000-01-01'; END$$;
CREATE OR REPLACE FUNCTION public.statement_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.statement_timestamp()'); RETURN '2000-01-01'; END$$;
CREATE OR REPLACE FUNCTION public.transaction_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.transaction_timestamp()'); RETURN '2000-01-01'; END$$;
CREATE OR REPLACE FUNCTION public.nextval(regclass) RETURNS bigint LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.nextval(regclass)'); RETURN 1; END$$;
CREATE OR REPLACE FUNCTION public.pg_backend_pid() RETURNS integer LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.pg_backend_pid()'); RETURN 0; END$$;
CREATE OR REPLACE FUNCTION public.hashtext(text) RETURNS integer LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.hashtext(text)'); RETURN 0; END$$;
CREATE OR REPLACE FUNCTION public.length(text) RETURNS integer LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.length(text)'); RETURN 1; END$$;
CREATE OR REPLACE FUNCTION public.octet_length(text) RETURNS integer LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.octet_length(text)'); RETURN 1; END$$;
CREATE OR REPLACE FUNCTION public.pg_try_advisory_xact_lock(bigint) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.pg_try_advisory_xact_lock(bigint)'); RETURN true; END$$;
CREATE OR REPLACE FUNCTION public.pg_try_advisory_lock(bigint) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.pg_try_advisory_lock(bigint)'); RETURN true; END$$;
CREATE OR REPLACE FUNCTION public.pg_has_role(name, text) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.pg_has_role(name,text)'); RETURN true; END$$;
CREATE OR REPLACE FUNCTION public.pg_has_role(name, name, text) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.pg_has_role(name,name,text)'); RETURN true; END$$;

CREATE OR REPLACE FUNCTION public.shadow_text_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.=(text,text)'); RETURN true; END$$;
DROP OPERATOR IF EXISTS public.= (text, text);
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.shadow_text_eq);
CREATE OR REPLACE FUNCTION public.shadow_bigint_eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.=(bigint,bigint)'); RETURN true; END$$;
DROP OPERATOR IF EXISTS public.= (bigint, bigint);
CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.shadow_bigint_eq);
CREATE OR REPLACE FUNCTION public.shadow_tstz_lt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.<(timestamptz,timestamptz)'); RETURN false; END$$;
DROP OPERATOR IF EXISTS public.< (timestamptz, timestamptz);
CREATE OPERATOR public.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.shadow_tstz_lt);
CREATE OR REPLACE FUNCTION public.shadow_tstz_gt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.>(timestamptz,timestamptz)'); RETURN false; END$$;
DROP OPERATOR IF EXISTS public.> (timestamptz, timestamptz);
CREATE OPERATOR public.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.shadow_tstz_gt);
CREATE OR REPLACE FUNCTION public.shadow_tstz_le(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.<=(timestamptz,timestamptz)'); RETURN true; END$$;
DROP OPERATOR IF EXISTS public.<= (timestamptz, timestamptz);
CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.shadow_tstz_le);
CREATE OR REPLACE FUNCTION public.shadow_tstz_ge(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.>=(timestamptz,timestamptz)'); RETURN true; END$$;
DROP OPERATOR IF EXISTS public.>= (timestamptz, timestamptz);
CREATE OPERATOR public.>= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.shadow_tstz_ge);
CREATE OR REPLACE FUNCTION public.shadow_tstz_plus(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('public.+(timestamptz,interval)'); RETURN '2000-01-01'; END$$;
DROP OPERATOR IF EXISTS public.+ (timestamptz, interval);
CREATE OPERATOR public.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = public.shadow_tstz_plus);
"#;

/// Per-session temporary shadows: relations in pg_temp are found first unless a function's
/// search_path puts pg_temp last explicitly.
const TEMP_SHADOWS: &str = r#"
CREATE TEMP TABLE lease (key text, owner text, fence bigint, hold_count integer,
                         expires_at timestamptz);
CREATE TEMP TABLE fence_seq (last_value bigint);
CREATE TEMP SEQUENCE dlock_fence_seq;
CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('pg_temp.clock_timestamp()'); RETURN '2000-01-01'; END$$;
CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN PERFORM public.shadow('pg_temp.now()'); RETURN '2000-01-01'; END$$;
"#;

/// Runs the whole API on `k` with `a` and `b` and asserts the contract's answers; hands `b`
/// back.
async fn exercise_the_api(a: &Session, b: Session, test: &str, k: &str) -> Session {
    let (oa, ob) = (owner(test, "a"), owner(test, "b"));
    let before = a.server_now().await.unwrap();
    let fence = a.acquire(k, &oa, Some("30s"), Some("0")).await.unwrap().expect("a free key is granted");
    assert!(fence > 0);
    assert_eq!(a.acquire(k, &oa, Some("10s"), Some("0")).await.unwrap(), Some(fence), "reentrant");
    assert_eq!(b.try_acquire(k, &ob, "30s").await.unwrap(), None, "held by another owner");
    let after = a.server_now().await.unwrap();

    let row = a.lease(k).await.unwrap().expect("dlock_locks shows the lease");
    assert_eq!(row.owner.as_deref(), Some(oa.as_str()));
    assert_eq!((row.fence, row.hold_count, row.waiters), (fence, 2, 0));
    assert_eq!(row.holder_pid, Some(a.pid()));
    let expires_at = row.expires_at.unwrap();
    assert!(expires_at > before + 29.0 && expires_at < after + 31.0, "expires_at {expires_at}");

    let renewed = a.renew(k, &oa, Some("60s")).await.unwrap().expect("renewed");
    let now = a.server_now().await.unwrap();
    assert!(renewed > now + 58.0 && renewed < now + 61.0, "renewed to {renewed}, now {now}");
    assert_eq!(b.renew(k, &ob, Some("60s")).await.unwrap(), None, "renew by another owner");
    assert!(!b.release(k, &ob).await.unwrap(), "release by another owner");
    assert!(a.holds(k, fence).await.unwrap());
    assert!(!a.holds(k, fence + 1).await.unwrap());

    // A waiter is granted when the last hold goes.
    let waiter = b.spawn_acquire(k, &ob, Some("30s"), Some("10s"));
    wait_for_waiters(a, k, 1).await;
    assert!(a.release(k, &oa).await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "one hold is left: the waiter still waits");
    assert!(a.release(k, &oa).await.unwrap());
    let attempt = finish(waiter, Duration::from_secs(10), "waiter").await;
    let granted = attempt.result.unwrap().expect("the waiter is granted");
    assert!(granted > fence);
    let b = attempt.session;
    assert_eq!(b.release_all(&ob).await.unwrap(), 1);
    assert_eq!(a.lease(k).await.unwrap(), None);

    // Expiry is judged by the server clock.
    let short = a.try_acquire(k, &oa, "200ms").await.unwrap().unwrap();
    assert_eq!(b.try_acquire(k, &ob, "30s").await.unwrap(), None, "not expired yet");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let next = b.try_acquire(k, &ob, "30s").await.unwrap();
    assert!(next.is_some_and(|f| f > short), "granted after expiry: {next:?} vs {short}");
    assert!(a.force_release(k).await.unwrap());
    assert!(!a.force_release(k).await.unwrap());

    expect_sqlstate(a.try_acquire("", &oa, "10s").await, &SqlState::INVALID_PARAMETER_VALUE, "empty key");
    expect_sqlstate(a.try_acquire(k, &oa, "0").await, &SqlState::INVALID_PARAMETER_VALUE, "ttl 0");
    b
}

/// What the shadow objects in public recorded.
async fn public_traces(s: &Session) -> Vec<String> {
    let mut traces: Vec<String> =
        s.query("SELECT what FROM public.shadow_log", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    let counts = s
        .query_one(
            "SELECT (SELECT count(*) FROM public.lease), (SELECT count(*) FROM public.dlock_lease), \
                    (SELECT is_called FROM public.fence_seq)",
            &[],
        )
        .await
        .unwrap();
    for (i, table) in [(0, "public.lease"), (1, "public.dlock_lease")] {
        let rows: i64 = counts.get(i);
        if rows != 0 {
            traces.push(format!("{rows} rows in {table}"));
        }
    }
    if counts.get::<_, bool>(2) {
        traces.push("public.fence_seq was advanced".to_string());
    }
    traces
}

/// What the temporary shadow objects of session `s` recorded.
async fn temp_traces(s: &Session) -> Vec<String> {
    let mut traces = Vec::new();
    let counts = s
        .query_one(
            "SELECT (SELECT count(*) FROM pg_temp.lease), (SELECT count(*) FROM pg_temp.fence_seq), \
                    (SELECT is_called FROM pg_temp.dlock_fence_seq)",
            &[],
        )
        .await
        .unwrap();
    for (i, table) in [(0, "pg_temp.lease"), (1, "pg_temp.fence_seq")] {
        let rows: i64 = counts.get(i);
        if rows != 0 {
            traces.push(format!("{rows} rows in {table} of pid {}", s.pid()));
        }
    }
    if counts.get::<_, bool>(2) {
        traces.push(format!("pg_temp.dlock_fence_seq of pid {} was advanced", s.pid()));
    }
    traces
}

#[tokio::test]
async fn shadow_objects_on_the_search_path_are_never_used() {
    calls_use_no_shadow("shadow_objects_on_the_search_path_are_never_used", Cluster::shared()).await;
}

/// The same, with every call of the lock cycle on its SQL path. dlock's functions pin no
/// search_path of their own (a SET clause would cost every call); their statements pin it
/// around themselves. An index of the test's own on the lease table makes it a table dlock did
/// not make exactly so, which dlock then only reads and writes by its statements.
#[tokio::test]
async fn shadow_objects_are_never_used_when_every_call_runs_its_statements() {
    let cluster = Cluster::shared_named("search-path-statements", &[]);
    let setup = cluster.connect().await;
    setup.batch_execute("CREATE INDEX t_lease_by_expiry ON dlock_internal.lease (expires_at)").await.unwrap();
    calls_use_no_shadow("shadow_objects_are_never_used_when_every_call_runs_its_statements", cluster).await;
    // The index holds an entry for every row: nothing wrote the table behind the executor's back.
    setup.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").await.unwrap();
    let (rows, indexed): (i64, i64) = {
        let row = setup
            .query_one(
                // pg_catalog's own aggregate and operator: under the hostile-schema net, traps
                // of those names come first on the search_path.
                "SELECT (SELECT pg_catalog.count(*) FROM dlock_internal.lease WHERE key IS NOT NULL), \
                        (SELECT pg_catalog.count(*) FROM dlock_internal.lease \
                          WHERE expires_at OPERATOR(pg_catalog.>) '-infinity'::pg_catalog.timestamptz)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(rows, indexed, "rows of dlock_internal.lease and entries of the test's index");
}

/// The API's calls, first with the default search_path, then with shadow objects first on it
/// (in public and pg_temp): the same answers, and no shadow used.
async fn calls_use_no_shadow(test: &str, cluster: &Cluster) {
    // The same calls with the default search_path, as the reference.
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    exercise_the_api(&a, b, test, &key(test, "reference")).await;

    let setup = cluster.connect().await;
    setup.batch_execute(PUBLIC_SHADOWS).await.unwrap();
    let (a, b) = (cluster.connect().await, cluster.connect().await);
    for (s, search_path) in [(&a, "pg_temp, public, pg_catalog"), (&b, "public, pg_catalog, pg_temp")] {
        s.batch_execute(TEMP_SHADOWS).await.unwrap();
        s.batch_execute(&format!("SET search_path = {search_path}")).await.unwrap();
        // The shadows are live for ordinary queries of this session.
        let shadowed: i32 = s.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
        assert_eq!(shadowed, 0, "public.pg_backend_pid() shadows the built-in here");
        let equal: bool = s.query_one("SELECT 'a'::text = 'b'::text", &[]).await.unwrap().get(0);
        assert!(equal, "public.=(text,text) shadows the built-in here");
        let temp: i64 = s.query_one("SELECT count(*) FROM lease", &[]).await.unwrap().get(0);
        assert_eq!(temp, 0, "an unqualified `lease` is the session's pg_temp.lease here");
    }
    setup.batch_execute("TRUNCATE public.shadow_log").await.unwrap();

    let b = exercise_the_api(&a, b, test, &key(test, "shadowed")).await;

    let mut traces = public_traces(&setup).await;
    traces.extend(temp_traces(&a).await);
    traces.extend(temp_traces(&b).await);
    assert!(traces.is_empty(), "dlock used objects from the caller's search_path: {traces:?}");
}
