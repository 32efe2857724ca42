//! `ALTER EXTENSION dlock UPDATE` from 0.1.0 (its install script is kept in `extension/sql/`): live
//! leases, TTL and session-bound, keep their fences; the catalogs come out as a fresh install
//! of the current version makes them; a failed update changes nothing; an unknown version is
//! refused. Every release adds its own script and these tests cover it.

use dlock_tests::{Cluster, Session, SqlState, expect_sqlstate};

/// The current release (the workspace's version).
const CURRENT: &str = env!("CARGO_PKG_VERSION");

/// Everything about the extension's objects that an update must get right, as sorted lines:
/// functions (signature, result, security, settings, volatility, strictness, parallel safety,
/// language, symbol, privileges), relations (kind, columns, privileges, options, indexes), the
/// view's definition, schemas and their privileges, the sequence's parameters (not its
/// position), the extension's own row and configuration, initial privileges and comments.
const CATALOG: &str = r#"
WITH ext AS (SELECT * FROM pg_extension WHERE extname = 'dlock'),
members AS (SELECT classid, objid FROM pg_depend, ext WHERE refobjid = ext.oid AND deptype = 'e')
SELECT 'function ' || p.oid::regprocedure::text || ' returns ' || pg_get_function_result(p.oid)
       || ' secdef=' || p.prosecdef || ' config=' || coalesce(array_to_string(p.proconfig, ';'), '')
       || ' vol=' || p.provolatile::text || ' strict=' || p.proisstrict || ' par=' || p.proparallel::text
       || ' lang=' || l.lanname || ' symbol=' || p.prosrc || ' lib=' || coalesce(p.probin, '')
       || ' acl=' || coalesce(p.proacl::text, 'default') || ' args=' || pg_get_function_arguments(p.oid)
  FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
  JOIN pg_language l ON l.oid = p.prolang
UNION ALL
SELECT 'relation ' || c.oid::regclass::text || ' kind=' || c.relkind::text || ' acl=' || coalesce(c.relacl::text, 'default')
       || ' options=' || coalesce(array_to_string(c.reloptions, ';'), '')
       || ' owner-is-superuser=' || (SELECT rolsuper FROM pg_roles WHERE oid = c.relowner)
  FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
UNION ALL
SELECT 'column ' || a.attrelid::regclass::text || ' #' || a.attnum || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' notnull=' || a.attnotnull || ' collation=' || coalesce((SELECT collname FROM pg_collation WHERE oid = a.attcollation), '')
  FROM members m JOIN pg_attribute a ON m.classid = 'pg_class'::regclass AND a.attrelid = m.objid
 WHERE a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
UNION ALL
SELECT 'constraint ' || conrelid::regclass::text || ' ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
  FROM members m JOIN pg_constraint co ON m.classid = 'pg_class'::regclass AND co.conrelid = m.objid
UNION ALL
SELECT 'view ' || c.oid::regclass::text || ' ' || pg_get_viewdef(c.oid)
  FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid WHERE c.relkind = 'v'
UNION ALL
SELECT 'sequence ' || s.seqrelid::regclass::text || ' ' || format_type(s.seqtypid, NULL) || ' ' || s.seqstart || ' '
       || s.seqincrement || ' ' || s.seqmin || ' ' || s.seqmax || ' ' || s.seqcycle
  FROM members m JOIN pg_sequence s ON m.classid = 'pg_class'::regclass AND s.seqrelid = m.objid
UNION ALL
SELECT 'schema ' || n.nspname || ' acl=' || coalesce(n.nspacl::text, 'default')
  FROM members m JOIN pg_namespace n ON m.classid = 'pg_namespace'::regclass AND n.oid = m.objid
UNION ALL
SELECT 'extension relocatable=' || extrelocatable || ' schema=' || extnamespace::regnamespace::text
       || ' config=' || coalesce((SELECT string_agg(c::regclass::text, ',') FROM unnest(extconfig) c), '')
       || ' conditions=' || coalesce(array_to_string(extcondition, ','), '')
       || ' comment=' || coalesce(obj_description(ext.oid, 'pg_extension'), '')
  FROM ext
UNION ALL
SELECT 'initial privileges ' || classoid::regclass::text || ' '
       || CASE WHEN classoid = 'pg_class'::regclass THEN objoid::regclass::text
               WHEN classoid = 'pg_proc'::regclass THEN objoid::regprocedure::text
               WHEN classoid = 'pg_namespace'::regclass THEN objoid::regnamespace::text
               ELSE objoid::text END
       || ' ' || objsubid || ' ' || privtype::text || ' ' || initprivs::text
  FROM pg_init_privs ip JOIN members m ON m.classid = ip.classoid AND m.objid = ip.objoid
UNION ALL
SELECT 'comment ' || d.classoid::regclass::text || ' ' || d.description
  FROM members m JOIN pg_description d ON d.classoid = m.classid AND d.objoid = m.objid
UNION ALL
SELECT 'event trigger ' || evtname || ' on ' || evtevent || ' tags=' || coalesce(array_to_string(evttags, ','), '')
       || ' function=' || evtfoid::regprocedure::text || ' enabled=' || evtenabled::text
  FROM members m JOIN pg_event_trigger e ON m.classid = 'pg_event_trigger'::regclass AND e.oid = m.objid
UNION ALL
SELECT 'role ' || rolname || ' login=' || rolcanlogin FROM pg_roles WHERE rolname IN ('dlock_admin', 'dlock_fencer')
ORDER BY 1
"#;

async fn catalog(s: &Session) -> Vec<String> {
    s.query(CATALOG, &[]).await.unwrap().iter().map(|r| r.get(0)).collect()
}

async fn version(s: &Session) -> String {
    s.query_one("SELECT extversion FROM pg_extension WHERE extname = 'dlock'", &[]).await.unwrap().get(0)
}

async fn create_database(superuser: &Session, cluster: &Cluster, name: &str, install: &str) -> Session {
    superuser.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let admin = cluster.connect_db("postgres", name).await;
    admin.batch_execute(install).await.unwrap();
    admin
}

/// The differences between two catalog descriptions, for a readable failure.
fn differences(expected: &[String], got: &[String]) -> String {
    let missing: Vec<&String> = expected.iter().filter(|l| !got.contains(l)).collect();
    let extra: Vec<&String> = got.iter().filter(|l| !expected.contains(l)).collect();
    format!("missing after the update:\n  {missing:#?}\nnot in a fresh install:\n  {extra:#?}")
}

#[tokio::test]
async fn an_update_from_0_1_0_keeps_live_leases_and_matches_a_fresh_install() {
    update_keeps_live_leases_and_matches_a_fresh_install("0.1.0").await;
}

#[tokio::test]
async fn an_update_from_0_2_0_keeps_live_leases_and_matches_a_fresh_install() {
    update_keeps_live_leases_and_matches_a_fresh_install("0.2.0").await;
}

async fn update_keeps_live_leases_and_matches_a_fresh_install(from: &str) {
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    let suffix = from.replace('.', "_");
    let (fresh_db, old_db) = (format!("upgrade_fresh_{suffix}"), format!("upgrade_old_{suffix}"));
    let fresh = create_database(&superuser, cluster, &fresh_db, "CREATE EXTENSION dlock SCHEMA public").await;
    assert_eq!(version(&fresh).await, CURRENT);
    let install = format!("CREATE EXTENSION dlock SCHEMA public VERSION '{from}'");
    let admin = create_database(&superuser, cluster, &old_db, &install).await;
    assert_eq!(version(&admin).await, from);
    admin.batch_execute(&format!("ALTER DATABASE {old_db} SET dlock.max_ttl = '2 hours'")).await.unwrap();

    // Leases of the old release: a session-bound one (its session stays connected), TTL ones,
    // and fences already handed out.
    let bound = cluster.connect_db("postgres", &old_db).await;
    let ttl = cluster.connect_db("postgres", &old_db).await;
    for i in 0..5 {
        let fence = ttl.try_acquire(&format!("churn{i}"), "o", "1 hour").await.unwrap().unwrap();
        assert!(ttl.release(&format!("churn{i}"), "o").await.unwrap(), "fence {fence}");
    }
    let bound_fence = bound.acquire("bound", "b", None, Some("0")).await.unwrap().expect("granted");
    let ttl_fence = ttl.try_acquire("ttl", "t", "1 hour").await.unwrap().expect("granted");
    let before: Vec<_> = [admin.lease("bound").await.unwrap(), admin.lease("ttl").await.unwrap()].into();
    // 0.2.0's other kinds of lease: a key held shared by two owners, and an election's leader.
    let shared_of =
        |owner: &'static str| format!("SELECT dlock_acquire_shared('shared', '{owner}', '1 hour')");
    let held_shared = |s: &'static Session| async move {
        let rows: i64 = s
            .query_one("SELECT count(*) FROM dlock_locks WHERE key = 'shared' AND mode = 'shared'", &[])
            .await
            .unwrap()
            .get(0);
        rows
    };
    if from == "0.2.0" {
        for owner in ["r1", "r2"] {
            let fence: Option<i64> = ttl.query_one(&shared_of(owner), &[]).await.unwrap().get(0);
            assert!(fence.is_some(), "{owner} holds the key shared");
        }
        let term: Option<i64> = ttl
            .query_one("SELECT dlock_campaign('election', 'c', '1 hour', info => 'i')", &[])
            .await
            .unwrap()
            .get(0);
        assert!(term.is_some(), "elected");
    }

    admin.batch_execute("ALTER EXTENSION dlock UPDATE").await.unwrap();
    assert_eq!(version(&admin).await, CURRENT);
    if from == "0.2.0" {
        // The shared holders keep the key from an exclusive lease until both let go; the
        // leader leads on.
        let admin: &'static Session = Box::leak(Box::new(cluster.connect_db("postgres", &old_db).await));
        assert_eq!(held_shared(admin).await, 2, "both shared leases are kept");
        assert_eq!(ttl.try_acquire("shared", "x", "1 hour").await.unwrap(), None, "held shared");
        let leader: String =
            admin.query_one("SELECT info FROM dlock_leader('election')", &[]).await.unwrap().get(0);
        assert_eq!(leader, "i");
        for owner in ["r1", "r2"] {
            assert!(ttl.release("shared", owner).await.unwrap(), "{owner} releases its shared lease");
        }
        assert!(ttl.try_acquire("shared", "x", "1 hour").await.unwrap().is_some(), "free once both let go");
        assert!(ttl.release("shared", "x").await.unwrap());
        assert!(ttl.release("election", "c").await.unwrap(), "the leader resigns");
    }

    let after: Vec<_> = [admin.lease("bound").await.unwrap(), admin.lease("ttl").await.unwrap()].into();
    assert_eq!(after, before, "live leases are kept as they were");
    assert_eq!(after[0].as_ref().map(|l| l.fence), Some(bound_fence));
    assert_eq!(after[1].as_ref().map(|l| l.fence), Some(ttl_fence));
    // Their holders carry on, and fences go on above them.
    assert!(bound.renew("bound", "b", Some("1 minute")).await.unwrap() == Some(f64::INFINITY));
    assert!(ttl.renew("ttl", "t", Some("1 hour")).await.unwrap().is_some());
    let next = ttl.try_acquire("next", "t", "1 hour").await.unwrap().expect("granted");
    assert!(next > bound_fence.max(ttl_fence), "fence {next} after {bound_fence}, {ttl_fence}");
    assert!(bound.release("bound", "b").await.unwrap());
    let setting: String = cluster
        .connect_db("postgres", &old_db)
        .await
        .query_one("SHOW dlock.max_ttl", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(setting, "2 hours", "settings are kept");

    let (expected, got) = (catalog(&fresh).await, catalog(&admin).await);
    assert!(expected.len() > 40, "the description covers the extension: {expected:#?}");
    assert_eq!(got, expected, "{}", differences(&expected, &got));
}

#[tokio::test]
async fn a_failed_update_changes_nothing() {
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    let admin = create_database(
        &superuser,
        cluster,
        "upgrade_failed",
        "CREATE EXTENSION dlock SCHEMA public VERSION '0.1.0'",
    )
    .await;
    let before = catalog(&admin).await;
    // The update's last check refuses a fence sequence at 2^42 (0.2.0's fast-mode fences could
    // then be lower than 0.1.0's): everything the script did before it is undone.
    admin.batch_execute("SELECT setval('dlock_internal.fence_seq', 4398046511104)").await.unwrap();
    expect_sqlstate(
        admin.batch_execute("ALTER EXTENSION dlock UPDATE").await,
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "the refused update",
    );
    assert_eq!(version(&admin).await, "0.1.0");
    assert_eq!(catalog(&admin).await, before, "not one change stays");
}

#[tokio::test]
async fn an_update_to_an_unknown_version_is_refused() {
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    let admin =
        create_database(&superuser, cluster, "upgrade_unknown", "CREATE EXTENSION dlock SCHEMA public").await;
    let before = catalog(&admin).await;
    let refused = admin.batch_execute("ALTER EXTENSION dlock UPDATE TO '9.9'").await;
    let message = refused.as_ref().err().and_then(|e| e.as_db_error()).map(|e| e.message().to_string());
    expect_sqlstate(refused, &SqlState::INVALID_PARAMETER_VALUE, "UPDATE TO '9.9'");
    assert!(message.unwrap().contains("9.9"), "the error names the version");
    assert_eq!(version(&admin).await, CURRENT);
    assert_eq!(catalog(&admin).await, before);
}

/// Where the PostgreSQL client programs under test are.
fn pg_bin(program: &str) -> String {
    let pg_config =
        std::env::var("PG_CONFIG").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = std::process::Command::new(pg_config).arg("--bindir").output().expect("pg_config runs");
    format!("{}/{program}", String::from_utf8(out.stdout).unwrap().trim())
}

fn run(cluster: &Cluster, program: &str, args: &[&str]) {
    let port = cluster.port().to_string();
    let out = std::process::Command::new(pg_bin(program))
        .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("ERROR"),
        "{program} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_dump_restores_into_a_fresh_database_with_its_fence_position() {
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    for (source, from) in [("dump_from_old", "0.1.0"), ("dump_from_current", CURRENT)] {
        let install = format!("CREATE EXTENSION dlock SCHEMA public VERSION '{from}'");
        let s = create_database(&superuser, cluster, source, &install).await;
        let mut last = 0;
        for i in 0..50 {
            last = s.try_acquire(&format!("k{i}"), "o", "1 hour").await.unwrap().expect("granted");
        }
        let dir = cluster.dir().to_path_buf();
        let custom = dir.join(format!("{source}.dump")).display().to_string();
        let plain = dir.join(format!("{source}.sql")).display().to_string();
        run(cluster, "pg_dump", &["-Fc", "-f", &custom, source]);
        run(cluster, "pg_dump", &["-f", &plain, source]);
        for (target, restore) in [("restored_custom", "pg_restore"), ("restored_plain", "psql")] {
            let target = format!("{target}_{source}");
            // From template0, as pg_restore's documentation says: the dump brings all of it.
            superuser.batch_execute(&format!("CREATE DATABASE {target} TEMPLATE template0")).await.unwrap();
            match restore {
                "pg_restore" => run(cluster, "pg_restore", &["--exit-on-error", "-d", &target, &custom]),
                _ => {
                    run(cluster, "psql", &["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &target, "-f", &plain])
                }
            }
            let restored = cluster.connect_db("postgres", &target).await;
            assert_eq!(version(&restored).await, CURRENT, "{target}: restored as the installed version");
            assert_eq!(
                restored.lease("k0").await.unwrap(),
                None,
                "{target}: leases are runtime state, not restored"
            );
            let next = restored.try_acquire("k0", "o", "1 hour").await.unwrap().expect("granted");
            assert!(next > last, "{target} from {from}: next fence {next} after {last}");
        }
    }
}
