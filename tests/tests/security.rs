//! Attacks, each as a test: a role borrowing someone's standing through a context where
//! PostgreSQL runs its code on another's behalf (maintenance commands, autovacuum, a
//! SECURITY DEFINER function, SET ROLE); a role pinning leases it does not hold; dumps by a
//! database owner who is not a superuser; calls captured by shadows in a writable `public`; and
//! privileges a DBA takes away.
//!
//! A binary of its own, on a cluster of its own: autovacuum runs every second there.

use std::process::Command;
use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, eventually, expect_sqlstate, within};

fn cluster() -> &'static Cluster {
    Cluster::shared_named("security", &["autovacuum_naptime = 1"])
}

async fn roles(superuser: &Session, plain: &[&str], admins: &[&str], fencers: &[&str]) {
    for role in plain.iter().chain(admins).chain(fencers) {
        superuser.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    }
    for role in admins {
        superuser.batch_execute(&format!("GRANT dlock_admin TO {role}")).await.unwrap();
    }
    for role in fencers {
        superuser.batch_execute(&format!("GRANT dlock_fencer TO {role}")).await.unwrap();
    }
}

/// The role holding `key` (`dlock_locks.holder_role`), as the superuser sees it.
async fn holder(superuser: &Session, key: &str) -> Option<String> {
    superuser.lease(key).await.unwrap().and_then(|row| row.holder_role)
}

/// A function of `schema` that a context under test runs on someone's behalf: it tries to
/// force-release `victim` and to read its owner, and leaves what happened as leases it takes
/// (`<probe>:forced` or `<probe>:refused`, and `<probe>:saw-owner`), whose `holder_role` then
/// says as whom it ran. Declared IMMUTABLE (a lie) so that it can be indexed.
fn probe_function(schema: &str, probe: &str, victim: &str, security_definer: bool) -> String {
    let definer = if security_definer { "SECURITY DEFINER" } else { "" };
    format!(
        r#"CREATE FUNCTION {schema}.{probe}(x integer) RETURNS integer IMMUTABLE {definer} LANGUAGE plpgsql AS $f$
BEGIN
  BEGIN
    PERFORM public.dlock_force_release('{victim}');
    PERFORM public.dlock_acquire('{probe}:forced', 'probe', '1 hour');
  EXCEPTION WHEN insufficient_privilege THEN
    PERFORM public.dlock_acquire('{probe}:refused', 'probe', '1 hour');
  END;
  IF EXISTS (SELECT FROM public.dlock_locks WHERE key = '{victim}' AND owner IS NOT NULL) THEN
    PERFORM public.dlock_acquire('{probe}:saw-owner', 'probe', '1 hour');
  END IF;
  RETURN x;
END
$f$"#
    )
}

/// What a probe left: (refused, forced, saw the owner), and as whom it ran.
async fn outcome(superuser: &Session, probe: &str) -> (bool, bool, bool, Option<String>) {
    let refused = holder(superuser, &format!("{probe}:refused")).await;
    let forced = holder(superuser, &format!("{probe}:forced")).await;
    let saw = holder(superuser, &format!("{probe}:saw-owner")).await;
    let ran_as = refused.clone().or(forced.clone());
    (refused.is_some(), forced.is_some(), saw.is_some(), ran_as)
}

async fn assert_refused_and_ran_as(superuser: &Session, probe: &str, victim: &str, role: &str) {
    let (refused, forced, saw, ran_as) = outcome(superuser, probe).await;
    assert!(
        refused && !forced,
        "{probe}: force release must be refused (refused {refused}, forced {forced})"
    );
    assert!(!saw, "{probe}: the victim's owner must stay hidden");
    assert_eq!(ran_as.as_deref(), Some(role), "{probe}: its lease belongs to the role PostgreSQL runs it as");
    let row = superuser.lease(victim).await.unwrap().expect("the victim's lease is still there");
    assert_eq!(row.holder_role.as_deref(), Some("sec_victim"));
}

#[tokio::test]
async fn code_run_for_a_table_owner_acts_as_that_owner_without_admin_standing() {
    let superuser = cluster().connect().await;
    roles(&superuser, &["sec_victim", "sec_mallory"], &[], &[]).await;
    superuser.batch_execute("CREATE SCHEMA mal AUTHORIZATION sec_mallory").await.unwrap();
    let victim = cluster().connect_as("sec_victim").await;
    let v = "security/maintenance/victim";
    assert!(victim.try_acquire(v, "victim-owner", "1 hour").await.unwrap().is_some());

    let mallory = cluster().connect_as("sec_mallory").await;
    for probe in ["probe_analyze", "probe_index", "probe_matview", "probe_auto", "probe_su"] {
        mallory.batch_execute(&probe_function("mal", probe, v, false)).await.unwrap();
    }
    mallory
        .batch_execute(
            "CREATE TABLE mal.t (x integer); INSERT INTO mal.t SELECT generate_series(1, 10); \
             CREATE INDEX ON mal.t (mal.probe_analyze(x)); \
             CREATE TABLE mal.t2 (x integer); INSERT INTO mal.t2 VALUES (1); \
             CREATE MATERIALIZED VIEW mal.mv AS SELECT mal.probe_matview(1) AS x WITH NO DATA; \
             CREATE TABLE mal.t3 (x integer) WITH (autovacuum_enabled = false, \
               autovacuum_analyze_threshold = 0, autovacuum_analyze_scale_factor = 0); \
             CREATE INDEX ON mal.t3 (mal.probe_auto(x)); \
             INSERT INTO mal.t3 SELECT generate_series(1, 10);",
        )
        .await
        .unwrap();
    // Building the index and inserting into it ran the probes as mallory herself: refused, as
    // for any plain role. Cleared, so that what follows is seen afresh.
    for key in ["probe_analyze:refused", "probe_auto:refused"] {
        assert!(superuser.force_release(key).await.unwrap(), "{key}: the index build ran the probe");
    }

    // A superuser runs maintenance on mallory's objects: PostgreSQL runs her code as her.
    superuser.batch_execute("ANALYZE mal.t").await.unwrap();
    assert_refused_and_ran_as(&superuser, "probe_analyze", v, "sec_mallory").await;
    superuser.batch_execute("CREATE INDEX ON mal.t2 (mal.probe_index(x))").await.unwrap();
    assert_refused_and_ran_as(&superuser, "probe_index", v, "sec_mallory").await;
    superuser.batch_execute("REFRESH MATERIALIZED VIEW mal.mv").await.unwrap();
    assert_refused_and_ran_as(&superuser, "probe_matview", v, "sec_mallory").await;

    // Autovacuum analyzes her table by itself (the cluster's naptime is 1 s).
    mallory.batch_execute("ALTER TABLE mal.t3 SET (autovacuum_enabled = true)").await.unwrap();
    eventually(Duration::from_secs(60), "autovacuum runs the probe", || async {
        outcome(&superuser, "probe_auto").await.3.is_some()
    })
    .await;
    assert_refused_and_ran_as(&superuser, "probe_auto", v, "sec_mallory").await;
    let analyzed: i64 = superuser
        .query_one("SELECT autoanalyze_count FROM pg_stat_user_tables WHERE relid = 'mal.t3'::regclass", &[])
        .await
        .unwrap()
        .get(0);
    assert!(analyzed >= 1, "it was autovacuum that ran it");

    // A superuser's own table indexed on her function: it runs as the superuser, but a
    // security-restricted operation lends no admin standing.
    superuser
        .batch_execute(
            "CREATE TABLE public.su_t (x integer); INSERT INTO public.su_t VALUES (1); \
             CREATE INDEX ON public.su_t (mal.probe_su(x));",
        )
        .await
        .unwrap();
    assert_refused_and_ran_as(&superuser, "probe_su", v, "postgres").await;
    assert!(victim.release(v, "victim-owner").await.unwrap());
}

#[tokio::test]
async fn a_security_definer_function_lends_its_owners_standing_not_its_callers() {
    let superuser = cluster().connect().await;
    roles(&superuser, &["sec_victim2", "sec_plain"], &["sec_admin"], &[]).await;
    superuser
        .batch_execute(
            "CREATE SCHEMA plain AUTHORIZATION sec_plain; CREATE SCHEMA adm AUTHORIZATION sec_admin",
        )
        .await
        .unwrap();
    let victim = cluster().connect_as("sec_victim2").await;
    let v = "security/definer/victim";
    assert!(victim.try_acquire(v, "victim-owner", "1 hour").await.unwrap().is_some());

    // A plain role's SECURITY DEFINER function, called by an administrator: it acts as the
    // plain role, with none of the caller's standing.
    let plain = cluster().connect_as("sec_plain").await;
    plain.batch_execute(&probe_function("plain", "probe_wrap", v, true)).await.unwrap();
    plain.batch_execute("GRANT USAGE ON SCHEMA plain TO PUBLIC").await.unwrap();
    let admin = cluster().connect_as("sec_admin").await;
    admin.batch_execute("SELECT plain.probe_wrap(1)").await.unwrap();
    let (refused, forced, saw, ran_as) = outcome(&superuser, "probe_wrap").await;
    assert!(refused && !forced && !saw, "refused {refused}, forced {forced}, saw the owner {saw}");
    assert_eq!(ran_as.as_deref(), Some("sec_plain"));
    let row = admin.lease(v).await.unwrap().expect("the victim's lease is still there");
    assert_eq!(row.owner.as_deref(), Some("victim-owner"), "the admin itself sees owners");

    // An administrator's SECURITY DEFINER function lends its standing: that is its owner's
    // choice, and the log names the owner.
    admin
        .batch_execute(
            "CREATE FUNCTION adm.free(k text) RETURNS boolean SECURITY DEFINER LANGUAGE sql \
             AS $$ SELECT public.dlock_force_release(k) $$; \
             GRANT USAGE ON SCHEMA adm TO sec_plain; GRANT EXECUTE ON FUNCTION adm.free(text) TO sec_plain",
        )
        .await
        .unwrap();
    let freed: bool = plain.query_one("SELECT adm.free($1)", &[&v]).await.unwrap().get(0);
    assert!(freed, "the admin's function force-releases for its caller");
    eventually(Duration::from_secs(5), "the force release is logged with its owner's name", || async {
        cluster().server_log_tail(200).contains(&format!("key \"{v}\" force-released by sec_admin"))
    })
    .await;
}

#[tokio::test]
async fn set_role_decides_standing_as_it_decides_ownership() {
    let superuser = cluster().connect().await;
    roles(&superuser, &["sec_victim3", "sec_switch"], &[], &[]).await;
    let victim = cluster().connect_as("sec_victim3").await;
    let v = "security/setrole/victim";
    assert!(victim.try_acquire(v, "victim-owner", "1 hour").await.unwrap().is_some());

    let switching = cluster().connect().await;
    switching.batch_execute("SET ROLE sec_switch").await.unwrap();
    expect_sqlstate(switching.force_release(v).await, &SqlState::INSUFFICIENT_PRIVILEGE, "force release");
    let row = switching.lease(v).await.unwrap().expect("listed");
    assert_eq!(row.owner, None, "a plain role does not see other roles' owners");
    assert!(switching.try_acquire("security/setrole/mine", "o", "1 hour").await.unwrap().is_some());
    assert_eq!(holder(&superuser, "security/setrole/mine").await.as_deref(), Some("sec_switch"));
    switching.batch_execute("RESET ROLE").await.unwrap();
    assert!(switching.force_release(v).await.unwrap(), "the superuser again");
}

#[tokio::test]
async fn only_the_leases_role_and_trusted_fencers_may_pin_it() {
    let superuser = cluster().connect().await;
    roles(&superuser, &["pin_holder", "pin_stranger"], &[], &["pin_fencer"]).await;
    let holder_s = cluster().connect_as("pin_holder").await;
    let k = "security/pin/k";
    let fence = holder_s.try_acquire(k, "holder", "1 hour").await.unwrap().expect("granted");

    // A stranger: another role's live lease is not theirs to pin, whether asked directly or
    // through the view, and no pin is left behind.
    let stranger = cluster().connect_as("pin_stranger").await;
    stranger.batch_execute("BEGIN").await.unwrap();
    expect_sqlstate(stranger.holds(k, fence).await, &SqlState::INSUFFICIENT_PRIVILEGE, "holds by a stranger");
    stranger.batch_execute("ROLLBACK; BEGIN").await.unwrap();
    expect_sqlstate(
        stranger.query("SELECT dlock_holds(key, fence) FROM dlock_locks WHERE key = $1", &[&k]).await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "holds over dlock_locks",
    );
    stranger.batch_execute("ROLLBACK; BEGIN").await.unwrap();
    assert!(!stranger.holds(k, fence + 1).await.unwrap(), "a fence no lease carries is simply false");
    assert!(!stranger.holds("security/pin/free", 1).await.unwrap());
    // Still inside the stranger's transaction: the holder renews and releases without delay.
    within(
        Duration::from_secs(5),
        "renew beside the stranger's transaction",
        holder_s.renew(k, "holder", Some("1 hour")),
    )
    .await
    .unwrap()
    .expect("renewed");
    stranger.batch_execute("ROLLBACK").await.unwrap();

    // The lease's own role pins its lease; so does a member of dlock_fencer, and the holder's
    // release then waits for the fencer's transaction, as a fenced write needs.
    holder_s.batch_execute("BEGIN").await.unwrap();
    assert!(holder_s.holds(k, fence).await.unwrap());
    holder_s.batch_execute("COMMIT").await.unwrap();
    let fencer = cluster().connect_as("pin_fencer").await;
    fencer.batch_execute("BEGIN").await.unwrap();
    assert!(fencer.holds(k, fence).await.unwrap(), "a fencer checks another role's fence");
    let release = tokio::spawn(async move {
        let released = holder_s.release(k, "holder").await;
        (holder_s, released)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!release.is_finished(), "the key cannot change hands while the fencer's transaction is open");
    fencer.batch_execute("COMMIT").await.unwrap();
    let (_, released) =
        within(Duration::from_secs(5), "release after the fencer commits", release).await.unwrap();
    assert!(released.unwrap());
}

/// Where the PostgreSQL client programs are (`pg_dump`, `pg_restore`).
fn pg_bin() -> String {
    let pg_config =
        std::env::var("PG_CONFIG").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = Command::new(&pg_config).arg("--bindir").output().expect("pg_config runs");
    String::from_utf8(out.stdout).expect("utf-8").trim().to_string()
}

#[tokio::test]
async fn a_database_owner_dumps_and_restores_the_fence_position() {
    let superuser = cluster().connect().await;
    roles(&superuser, &["dump_owner"], &[], &[]).await;
    for db in ["dump_src", "dump_dst"] {
        // From template0: what `make test-hostile` plants in template1 is for other tests.
        superuser
            .batch_execute(&format!("CREATE DATABASE {db} OWNER dump_owner TEMPLATE template0"))
            .await
            .unwrap();
    }
    // On a managed service an administrator creates the extension; the database owner, no
    // superuser, uses it, dumps and restores.
    for db in ["dump_src", "dump_dst"] {
        cluster()
            .connect_db("postgres", db)
            .await
            .batch_execute("CREATE EXTENSION dlock SCHEMA public")
            .await
            .unwrap();
    }
    let owner = cluster().connect_db("dump_owner", "dump_src").await;
    let mut last = 0;
    for i in 0..50 {
        last = owner.try_acquire(&format!("k{i}"), "o", "1 hour").await.unwrap().expect("granted");
    }
    let file = cluster().dir().join("dump_src.dump");
    let dump = Command::new(format!("{}/pg_dump", pg_bin()))
        .args(["-h", "127.0.0.1", "-p", &cluster().port().to_string(), "-U", "dump_owner", "-Fc", "-f"])
        .arg(&file)
        .arg("dump_src")
        .output()
        .expect("pg_dump runs");
    assert!(
        dump.status.success(),
        "pg_dump as the database owner: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let restore = Command::new(format!("{}/pg_restore", pg_bin()))
        .args(["-h", "127.0.0.1", "-p", &cluster().port().to_string(), "-U", "dump_owner", "-d", "dump_dst"])
        .arg(&file)
        .output()
        .expect("pg_restore runs");
    assert!(
        restore.status.success(),
        "pg_restore as the database owner: {}",
        String::from_utf8_lossy(&restore.stderr)
    );
    let restored = cluster().connect_db("dump_owner", "dump_dst").await;
    assert_eq!(restored.lease("k0").await.unwrap(), None, "leases are runtime state, not restored");
    let next = restored.try_acquire("k0", "o", "1 hour").await.unwrap().expect("granted");
    assert!(next > last, "the restored fence position: next fence {next} after {last}");
}

#[tokio::test]
async fn qualified_calls_into_a_private_schema_cannot_be_captured_by_a_writable_public() {
    let superuser = cluster().connect().await;
    roles(&superuser, &["shadow_app", "shadow_mallory"], &[], &[]).await;
    superuser.batch_execute("CREATE DATABASE shadow_db").await.unwrap();
    let admin = cluster().connect_db("postgres", "shadow_db").await;
    // A database as PostgreSQL 14 and older created it: anyone may create in public.
    admin
        .batch_execute(
            "GRANT CREATE ON SCHEMA public TO PUBLIC; \
             CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock; \
             GRANT USAGE ON SCHEMA dlock TO shadow_app;",
        )
        .await
        .unwrap();
    let mallory = cluster().connect_db("shadow_mallory", "shadow_db").await;
    mallory
        .batch_execute(
            "CREATE TABLE public.captured (owner text); GRANT INSERT ON public.captured TO PUBLIC; \
             CREATE FUNCTION public.dlock_acquire(key text, owner text, ttl text) RETURNS bigint \
             LANGUAGE sql AS $$ INSERT INTO public.captured VALUES (owner); SELECT -1::bigint $$;",
        )
        .await
        .unwrap();
    let app = cluster().connect_db("shadow_app", "shadow_db").await;
    app.batch_execute("SET search_path = dlock, public").await.unwrap();

    // Untyped literals prefer the shadow's text parameter, whatever the schema order: an
    // unqualified call is captured.
    app.batch_execute("SELECT dlock_acquire('k', 'secret-1', '10 seconds')").await.unwrap();
    // A qualified call is not.
    let fence: Option<i64> =
        app.query_one("SELECT dlock.dlock_acquire('k', 'secret-2', '10 seconds')", &[]).await.unwrap().get(0);
    assert!(fence.is_some_and(|f| f > 0), "the real dlock_acquire answered: {fence:?}");
    let captured: Vec<String> = admin
        .query("SELECT owner FROM public.captured", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(captured, ["secret-1"], "only the unqualified call reached the shadow");

    // Without USAGE on the schema, another role cannot use dlock at all.
    expect_sqlstate(
        mallory.query_one("SELECT dlock.dlock_acquire('k2', 'o', '10 seconds')", &[]).await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "a role without USAGE on schema dlock",
    );
}

#[tokio::test]
async fn a_dba_decides_who_may_use_dlock() {
    let superuser = cluster().connect().await;
    roles(&superuser, &["use_app", "use_other"], &[], &[]).await;
    superuser.batch_execute("CREATE DATABASE use_db").await.unwrap();
    let admin = cluster().connect_db("postgres", "use_db").await;
    // The recipe of the docs, for an installation in public.
    admin
        .batch_execute(
            "CREATE EXTENSION dlock SCHEMA public; \
             REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC; \
             REVOKE SELECT ON public.dlock_locks FROM PUBLIC; \
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO use_app; \
             GRANT SELECT ON public.dlock_locks TO use_app;",
        )
        .await
        .unwrap();
    let app = cluster().connect_db("use_app", "use_db").await;
    let other = cluster().connect_db("use_other", "use_db").await;
    assert!(app.try_acquire("k", "o", "1 hour").await.unwrap().is_some());
    assert!(app.lease("k").await.unwrap().is_some());
    expect_sqlstate(
        other.try_acquire("k2", "o", "1 hour").await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "acquire",
    );
    expect_sqlstate(other.lease("k").await, &SqlState::INSUFFICIENT_PRIVILEGE, "dlock_locks");
    assert!(app.release("k", "o").await.unwrap());
}
