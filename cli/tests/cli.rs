//! The `dlock` binary against a throwaway cluster: `run` (lock held while the command runs,
//! exit status passthrough, 75 when not acquired, SIGTERM when the lease is lost), `list`, and
//! the `acquire`/`renew`/`release` steps for scripts.

use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Session, eventually, key, within};
use serde_json::Value;
use tokio::sync::OnceCell;

use dlock_tests::TlsCluster;

/// The superuser's URL of the shared cluster.
fn url() -> String {
    format!("postgresql://postgres@127.0.0.1:{}/postgres", Cluster::shared().port())
}

/// `dlock --database-url <shared cluster> args…`, untouched by the caller's environment.
fn dlock(args: &[&str]) -> tokio::process::Command {
    dlock_at(&url(), args)
}

/// `dlock --database-url <url> args…`, untouched by the caller's environment.
fn dlock_at(url: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dlock"));
    command
        .env_remove("DLOCK_OWNER")
        .env_remove("DATABASE_URL")
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .arg("--database-url")
        .arg(url)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// What a finished `dlock` call said: exit code, stdout, stderr.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn call(args: &[&str]) -> Outcome {
    finished(dlock(args)).await
}

async fn finished(mut command: tokio::process::Command) -> Outcome {
    let output =
        within(Duration::from_secs(20), "dlock finishes", command.output()).await.expect("dlock runs");
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The `dlock list --json` row of `key`, if the key is held.
async fn listed(key: &str) -> Option<Value> {
    let out = call(&["list", "--json"]).await;
    assert_eq!(out.code, Some(0), "list failed: {}", out.stderr);
    let rows: Value = serde_json::from_str(&out.stdout).expect("list --json prints JSON");
    rows.as_array().expect("a JSON array").iter().find(|row| row["key"] == key).cloned()
}

async fn admin() -> Session {
    Cluster::shared().connect().await
}

#[tokio::test]
async fn run_holds_the_lock_while_the_command_runs_and_releases_after() {
    let k = key("cli_run_holds", "k");
    let bin = env!("CARGO_BIN_EXE_dlock");
    let url = url();
    // The command is a second dlock call that lists the leases while the first holds the key.
    let out = call(&[
        "run",
        "--key",
        &k,
        "--owner",
        "cli-runner",
        "--",
        bin,
        "--database-url",
        &url,
        "list",
        "--json",
    ])
    .await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let rows: Value = serde_json::from_str(&out.stdout).expect("the command's JSON");
    let row =
        rows.as_array().unwrap().iter().find(|row| row["key"] == k.as_str()).expect("key held during run");
    assert_eq!(row["owner"], "cli-runner");
    assert!(row["fence"].as_i64().unwrap() > 0);
    assert_eq!(row["hold_count"], 1);
    assert!(row["expires_at"].is_string());
    assert!(listed(&k).await.is_none(), "released after the command ended");
}

#[tokio::test]
async fn run_passes_the_exit_status_and_the_fence_through() {
    let k = key("cli_run_status", "k");
    let out = call(&["run", "--key", &k, "--", "sh", "-c", r#"test -n "$DLOCK_FENCE" && exit 3"#]).await;
    assert_eq!(out.code, Some(3), "stderr: {}", out.stderr);
    let out = call(&["run", "--key", &k, "--", "true"]).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
}

#[tokio::test]
async fn run_exits_75_without_running_when_another_owner_holds_the_key() {
    let k = key("cli_run_busy", "k");
    let held = call(&["acquire", &k, "--owner", "other", "--ttl", "30s"]).await;
    assert_eq!(held.code, Some(0), "stderr: {}", held.stderr);
    let out = call(&["run", "--key", &k, "--wait", "200ms", "--", "sh", "-c", "echo ran"]).await;
    assert_eq!(out.code, Some(75), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "", "the command must not run");
    let out = call(&["acquire", &k, "--owner", "third"]).await;
    assert_eq!(out.code, Some(75), "acquire is refused alike: {}", out.stderr);
    assert_eq!(call(&["release", &k, "--owner", "other"]).await.code, Some(0));
}

#[tokio::test]
async fn a_command_that_outlives_a_force_release_gets_sigterm() {
    let k = key("cli_run_lost", "k");
    let mut run = dlock(&["run", "--key", &k, "--ttl", "2s", "--grace", "1s", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("dlock run starts");
    let admin = admin().await;
    eventually(Duration::from_secs(10), "run holds the key", || async {
        admin.lease(&k).await.unwrap().is_some()
    })
    .await;
    assert!(admin.force_release(&k).await.unwrap());
    let released = Instant::now();
    // The watchdog renews every ttl/3 and finds the lease gone; then SIGTERM (sleep dies of it).
    let status = within(Duration::from_secs(2 + 1 + 3), "dlock run ends after the lease is lost", run.wait())
        .await
        .unwrap();
    assert!(matches!(status.code(), Some(143 | 137)), "{status:?} after {:?}", released.elapsed());
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut run.stderr.take().unwrap(), &mut stderr).await.unwrap();
    assert!(stderr.contains("was lost"), "stderr: {stderr}");
}

#[tokio::test]
async fn acquire_renew_release_round_trip_with_a_stable_owner() {
    let k = key("cli_round_trip", "k");
    let out = call(&["acquire", &k, "--owner", "script-1", "--ttl", "5s"]).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let fence: i64 = out.stdout.trim().parse().expect("acquire prints the fence");

    let row = listed(&k).await.expect("the lease outlives the acquire call");
    assert_eq!((row["owner"].as_str(), row["fence"].as_i64()), (Some("script-1"), Some(fence)));

    let out = call(&["renew", &k, "--owner", "script-1", "--ttl", "1h", "--json"]).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let renewed: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(renewed["renewed"], true);
    assert_eq!(renewed["expires_at"], listed(&k).await.unwrap()["expires_at"]);

    assert_eq!(call(&["release", &k, "--owner", "script-1"]).await.code, Some(0));
    assert!(listed(&k).await.is_none());
    assert_eq!(call(&["release", &k, "--owner", "script-1"]).await.code, Some(1), "already released");
    assert_eq!(call(&["renew", &k, "--owner", "script-1", "--ttl", "5s"]).await.code, Some(1));
}

#[tokio::test]
async fn release_of_another_owners_lease_exits_1_and_force_frees_it() {
    let k = key("cli_release_other", "k");
    assert_eq!(call(&["acquire", &k, "--owner", "mine"]).await.code, Some(0));
    let out = call(&["release", &k, "--owner", "someone-else"]).await;
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert!(listed(&k).await.is_some(), "still held by its owner");
    assert_eq!(call(&["release", &k, "--force"]).await.code, Some(0));
    assert!(listed(&k).await.is_none());
    assert_eq!(call(&["release", &k, "--force"]).await.code, Some(1), "a free key");
}

#[tokio::test]
async fn scripted_steps_without_an_owner_are_usage_errors() {
    let out = call(&["acquire", &key("cli_no_owner", "k")]).await;
    assert_eq!(out.code, Some(2), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("--owner"), "stderr: {}", out.stderr);
}

#[tokio::test]
async fn a_key_or_ttl_the_client_refuses_exits_64_and_one_the_server_refuses_exits_70() {
    let long = "k".repeat(1025);
    let out = call(&["acquire", &long, "--owner", "cli_bad_key"]).await;
    assert_eq!(out.code, Some(64), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("key is 1025 bytes long") && out.stderr.contains("22023"), "{}", out.stderr);
    let k = key("cli_bad_values", "k");
    let out = call(&["acquire", &k, "--owner", "cli_bad_ttl", "--ttl", "0s"]).await;
    assert_eq!(out.code, Some(64), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("ttl must be positive"), "{}", out.stderr);
    // Above dlock.max_ttl (1 day): only the server knows.
    let out = call(&["acquire", &k, "--owner", "cli_bad_ttl", "--ttl", "25h"]).await;
    assert_eq!(out.code, Some(70), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("dlock.max_ttl"), "{}", out.stderr);
    assert!(listed(&k).await.is_none(), "nothing was taken");
}

#[tokio::test]
async fn list_prints_a_table_with_a_header() {
    let k = key("cli_list_table", "k");
    assert_eq!(call(&["acquire", &k, "--owner", "tabled"]).await.code, Some(0));
    let out = call(&["list"]).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(out.stdout.starts_with("key "), "{}", out.stdout);
    assert!(out.stdout.lines().any(|line| line.starts_with(&k) && line.contains("tabled")), "{}", out.stdout);
    assert_eq!(call(&["release", &k, "--owner", "tabled"]).await.code, Some(0));
}

#[tokio::test]
async fn a_bad_connection_exits_70_with_a_message() {
    let out = within(
        Duration::from_secs(20),
        "dlock gives up",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
            .args(["--database-url", "postgresql://postgres@127.0.0.1:1/postgres", "list"])
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(70));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("dlock: "));
}

#[tokio::test]
async fn sigterm_to_run_is_forwarded_and_the_lease_released_after() {
    let k = key("cli_run_forward", "k");
    let mut run = dlock(&["run", "--key", &k, "--", "sleep", "30"]).spawn().expect("dlock run starts");
    let admin = admin().await;
    eventually(Duration::from_secs(10), "run holds the key", || async {
        admin.lease(&k).await.unwrap().is_some()
    })
    .await;
    let pid = i32::try_from(run.id().unwrap()).unwrap();
    // SAFETY: kill(2) of the child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = within(Duration::from_secs(5), "run ends with its command", run.wait()).await.unwrap();
    assert_eq!(status.code(), Some(143), "the command died of the forwarded SIGTERM");
    assert!(admin.lease(&k).await.unwrap().is_none(), "released once the command ended");
}

/// Runs `dlock --database-url <url>` with `args` and the `list --json` row of `key` after.
async fn acquire_and_list_at(url: &str, k: &str) -> Value {
    let out = finished(dlock_at(url, &["acquire", k, "--owner", "cli-elsewhere", "--ttl", "30s"])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let fence: i64 = out.stdout.trim().parse().expect("acquire prints the fence");
    let out = finished(dlock_at(url, &["list", "--json"])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let rows: Value = serde_json::from_str(&out.stdout).expect("list --json prints JSON");
    let row = rows.as_array().unwrap().iter().find(|row| row["key"] == k).cloned().expect("listed");
    assert_eq!(row["fence"].as_i64(), Some(fence));
    let out = finished(dlock_at(url, &["renew", k, "--owner", "cli-elsewhere", "--ttl", "1m"])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let out = finished(dlock_at(url, &["release", k, "--owner", "cli-elsewhere"])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    row
}

#[tokio::test]
async fn the_extension_in_a_schema_of_its_own_is_found_past_shadows_in_public() {
    let db = "cli_schema_own";
    admin().await.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
    let session = Cluster::shared().connect_db("postgres", db).await;
    session
        .batch_execute(
            "CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock; \
             CREATE FUNCTION public.captured() RETURNS bigint LANGUAGE plpgsql \
                 AS $$ BEGIN RAISE EXCEPTION 'captured by a shadow in public'; END $$; \
             CREATE FUNCTION public.dlock_acquire(text, text, interval, interval) RETURNS bigint \
                 LANGUAGE sql AS 'SELECT public.captured()'; \
             CREATE FUNCTION public.dlock_release(text, text) RETURNS boolean \
                 LANGUAGE sql AS 'SELECT public.captured() > 0'; \
             CREATE VIEW public.dlock_locks AS SELECT 'shadow'::text AS key, public.captured() AS fence;",
        )
        .await
        .unwrap();
    let url = format!("postgresql://postgres@127.0.0.1:{}/{db}", Cluster::shared().port());
    let k = key("cli_schema_own", "k");
    acquire_and_list_at(&url, &k).await;
}

#[tokio::test]
async fn a_database_without_the_extension_exits_70_saying_so() {
    let db = "cli_schema_missing";
    admin().await.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
    let url = format!("postgresql://postgres@127.0.0.1:{}/{db}", Cluster::shared().port());
    for args in [&["list"][..], &["acquire", "k", "--owner", "o"]] {
        let out = finished(dlock_at(&url, args)).await;
        assert_eq!(out.code, Some(70), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("not installed in database \"cli_schema_missing\""), "{}", out.stderr);
    }
}

/// The TLS cluster of this test binary.
async fn served() -> Option<&'static TlsCluster> {
    static CLUSTER: OnceCell<Option<TlsCluster>> = OnceCell::const_new();
    CLUSTER.get_or_init(|| TlsCluster::start("cli-tls")).await.as_ref()
}

#[tokio::test]
async fn the_cli_connects_with_sslmode_verify_full_from_the_url_or_the_environment() {
    let Some(tls) = served().await else { return };
    let verified = tls.url("127.0.0.1", &format!("sslmode=verify-full sslrootcert={}", tls.ca.display()));
    acquire_and_list_at(&verified, &key("cli_tls", "url")).await;

    // PGSSLMODE and PGSSLROOTCERT, as with psql.
    let plain_url = tls.url("127.0.0.1", "");
    let mut command = dlock_at(&plain_url, &["list"]);
    command.env("PGSSLMODE", "verify-full").env("PGSSLROOTCERT", &tls.ca);
    let out = finished(command).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);

    // The wrong CA: exit 70, saying the certificate could not be verified.
    let mut command = dlock_at(&plain_url, &["list"]);
    command.env("PGSSLMODE", "verify-full").env("PGSSLROOTCERT", &tls.other_ca);
    let out = finished(command).await;
    assert_eq!(out.code, Some(70), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("certificate could not be verified"), "stderr: {}", out.stderr);
    let wrong = tls.url("127.0.0.1", &format!("sslmode=verify-full sslrootcert={}", tls.other_ca.display()));
    let out = finished(dlock_at(&wrong, &["acquire", "k", "--owner", "o"])).await;
    assert_eq!(out.code, Some(70), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("certificate could not be verified"), "stderr: {}", out.stderr);
}

#[tokio::test]
async fn run_shared_holds_beside_other_readers_and_keeps_writers_out() {
    let k = key("cli_run_shared", "k");
    let bin = env!("CARGO_BIN_EXE_dlock");
    let url = url();
    // While this reader runs its command, a second reader runs too and a writer is refused.
    let script = format!(
        r#""{bin}" --database-url "{url}" run --shared --key "{k}" -- true || exit 10
           "{bin}" --database-url "{url}" run --key "{k}" -- true; test $? -eq 75 || exit 11
           "{bin}" --database-url "{url}" run --max-holders 2 --key "{k}" -- true; test $? -eq 70 || exit 12"#
    );
    let out = call(&["run", "--shared", "--key", &k, "--", "sh", "-c", &script]).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("max_holders"), "a semaphore of another size is refused: {}", out.stderr);
    assert!(listed(&k).await.is_none(), "released after the command ended");
    let out = call(&["run", "--max-holders", "1", "--key", &k, "--", "sh", "-c", "exit 4"]).await;
    assert_eq!(out.code, Some(4), "a semaphore passes the status through: {}", out.stderr);
}

#[tokio::test]
async fn run_with_no_permits_exits_64_without_running() {
    let k = key("cli_run_no_permits", "k");
    let out =
        call(&["run", "--shared", "--max-holders", "0", "--key", &k, "--", "sh", "-c", "echo ran"]).await;
    assert_eq!(out.code, Some(64), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("--max-holders must be at least 1"), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "", "the command must not run");
    // Refused before connecting: no server is needed to say so.
    let out = finished(dlock_at(
        "postgresql://postgres@127.0.0.1:1/postgres",
        &["run", "--max-holders", "0", "--key", &k, "--", "true"],
    ))
    .await;
    assert_eq!(out.code, Some(64), "stderr: {}", out.stderr);
}

#[tokio::test]
async fn elect_runs_the_command_while_leading_and_stops_it_when_the_lead_is_lost() {
    let name = key("cli_elect", "e");
    let mut elect = dlock(&[
        "elect",
        &name,
        "--info",
        "node-1:8080",
        "--ttl",
        "2s",
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        r#"test -n "$DLOCK_TERM" && exec sleep 30"#,
    ])
    .stderr(Stdio::piped())
    .spawn()
    .expect("dlock elect starts");
    let admin = admin().await;
    eventually(Duration::from_secs(10), "elect leads", || async {
        admin.lease(&name).await.unwrap().is_some()
    })
    .await;

    let out = call(&["leader", &name, "--json"]).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let leader: Value = serde_json::from_str(&out.stdout).expect("leader --json prints JSON");
    assert_eq!(leader["info"], "node-1:8080");
    assert_eq!(leader["term"].as_i64(), Some(admin.lease(&name).await.unwrap().unwrap().fence));
    assert!(leader["since"].is_string() && leader["expires_at"].is_string(), "{leader}");
    let out = call(&["leader", &name]).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stdout.lines().any(|line| line.starts_with("info") && line.ends_with("node-1:8080")),
        "{}",
        out.stdout
    );

    assert!(admin.force_release(&name).await.unwrap());
    let status = within(Duration::from_secs(2 + 1 + 3), "elect ends after the lead is lost", elect.wait())
        .await
        .unwrap();
    assert!(matches!(status.code(), Some(143 | 137)), "{status:?}");
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut elect.stderr.take().unwrap(), &mut stderr).await.unwrap();
    assert!(stderr.contains("the lead of") && stderr.contains("was lost"), "stderr: {stderr}");
}

#[tokio::test]
async fn elect_passes_the_status_through_and_resigns_after() {
    let name = key("cli_elect_status", "e");
    let out = call(&["elect", &name, "--", "sh", "-c", "exit 5"]).await;
    assert_eq!(out.code, Some(5), "stderr: {}", out.stderr);
    let out = call(&["leader", &name]).await;
    assert_eq!(out.code, Some(1), "nobody leads once the command ended");
    assert!(out.stderr.contains("nobody leads"), "stderr: {}", out.stderr);
    let out = call(&["leader", &name, "--json"]).await;
    assert_eq!((out.code, out.stdout.trim()), (Some(1), "null"), "stderr: {}", out.stderr);
}

#[tokio::test]
async fn elect_exits_75_when_its_wait_elapses_while_another_leads() {
    let name = key("cli_elect_busy", "e");
    let mut first = dlock(&["elect", &name, "--", "sleep", "30"]).spawn().expect("dlock elect starts");
    let admin = admin().await;
    eventually(Duration::from_secs(10), "the first leads", || async {
        admin.lease(&name).await.unwrap().is_some()
    })
    .await;
    let out = call(&["elect", &name, "--wait", "300ms", "--", "sh", "-c", "echo ran"]).await;
    assert_eq!(out.code, Some(75), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "", "the command must not run");
    let pid = i32::try_from(first.id().unwrap()).unwrap();
    // SAFETY: kill(2) of the child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = within(Duration::from_secs(5), "elect ends with its command", first.wait()).await.unwrap();
    assert_eq!(status.code(), Some(143), "the command died of the forwarded SIGTERM");
    assert!(admin.lease(&name).await.unwrap().is_none(), "resigned once the command ended");
}
