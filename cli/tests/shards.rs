//! `dlock --shards FILE`: `shards locate` and `shards show` read the map only (no server);
//! the lease steps and `list` go to the server each key belongs to (two databases of a
//! throwaway cluster of this binary); `shards apply` installs a map and moves keys without two
//! holders, resumably.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use dlock_tests::Cluster;
use serde_json::Value;

/// `dlock args…`, untouched by the caller's environment.
fn dlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlock"))
        .env_remove("DLOCK_OWNER")
        .env_remove("DATABASE_URL")
        .env_remove("DLOCK_SHARDS")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("dlock runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes `text` to a map file of this test, named `name`.
fn map_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dlock-cli-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const MAP: &str = "epoch = 7\n\n[servers]\npg-b = \"postgresql://app:s3cret@db-b:5432/app\"\n\
                   pg-a = \"host=db-a user=app password='hush hush'\"\npg-c = \"host=db-c\"\n";

#[test]
fn locate_prints_the_server_and_a_hash_tag_family_shares_it() {
    let file = map_file("locate.toml", MAP);
    let file = file.to_str().unwrap();
    let located = |key: &str| {
        let out = dlock(&["--shards", file, "shards", "locate", key]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out).trim().to_owned()
    };
    let server = located("{tenant-7}:report");
    assert!(["pg-a", "pg-b", "pg-c"].contains(&server.as_str()), "{server}");
    assert_eq!(located("{tenant-7}:invoice"), server);
    // Pinned in dlock-core: every client of a deployment routes alike.
    let spread: std::collections::BTreeSet<String> = (0..30).map(|i| located(&format!("k{i}"))).collect();
    assert_eq!(spread.len(), 3, "keys spread over every server");

    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .env_remove("DATABASE_URL")
        .env("DLOCK_SHARDS", file)
        .args(["shards", "locate", "{tenant-7}:x", "--json"])
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(answer["server"], server.as_str());
    assert_eq!(answer["epoch"], 7);
}

#[test]
fn show_prints_the_map_without_passwords() {
    let file = map_file("show.toml", MAP);
    let out = dlock(&["--shards", file.to_str().unwrap(), "shards", "show"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains("s3cret") && !text.contains("hush"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "epoch  7");
    assert!(lines[2].starts_with("pg-a") && lines[2].contains("password=***"), "{text}");
    assert!(lines[3].starts_with("pg-b") && lines[3].contains("app:***@db-b"), "{text}");
    assert!(lines[4].starts_with("pg-c"), "{text}");

    let out = dlock(&["--shards", file.to_str().unwrap(), "shards", "show", "--json"]);
    let map: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(map["epoch"], 7);
    assert_eq!(map["servers"][1]["name"], "pg-b");
    assert_eq!(map["servers"][1]["connection"], "postgresql://app:***@db-b:5432/app");
}

#[test]
fn shards_needs_a_map_and_refuses_a_database_url_beside_it() {
    let out = dlock(&["shards", "show"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--shards"), "{}", stderr(&out));
    let file = map_file("both.toml", MAP);
    let out = dlock(&["--shards", file.to_str().unwrap(), "--database-url", "host=x", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot be used with"), "{}", stderr(&out));
}

#[test]
fn a_bad_map_file_exits_64_naming_the_file_and_the_entry() {
    let cases = [
        ("no-epoch.toml", "[servers]\na = \"host=a\"\n", "epoch"),
        ("epoch-0.toml", "epoch = 0\n[servers]\na = \"host=a\"\n", "epoch must be"),
        ("no-servers.toml", "epoch = 1\n[servers]\n", "names no server"),
        ("bad-name.toml", "epoch = 1\n[servers]\n\"a b\" = \"host=a\"\n", "\"a b\""),
        ("unknown.toml", "epoch = 1\nreplicas = 2\n[servers]\na = \"host=a\"\n", "replicas"),
        ("twice.toml", "epoch = 1\n[servers]\na = \"host=a\"\na = \"host=b\"\n", "duplicate"),
    ];
    for (name, text, says) in cases {
        let file = map_file(name, text);
        let out = dlock(&["--shards", file.to_str().unwrap(), "shards", "locate", "k"]);
        assert_eq!(out.status.code(), Some(64), "{name}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(message.contains(name) && message.contains(says), "{name}: {message}");
    }
    let out = dlock(&["--shards", "/nonexistent/map.toml", "shards", "show"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(stderr(&out).contains("/nonexistent/map.toml"));
}

/// A map over databases s1 and s2 of this binary's cluster (created on first use).
fn live_map() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let cluster = Cluster::shared_named("cli-shards", &[]);
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let admin = cluster.connect().await;
            for db in ["s1", "s2"] {
                admin.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
                let session = cluster.connect_db("postgres", db).await;
                session
                    .batch_execute("CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock")
                    .await
                    .unwrap();
            }
        });
        let url =
            |db: &str| format!("postgresql://postgres@127.0.0.1:{}/{db}?sslmode=disable", cluster.port());
        let file = map_file(
            "live.toml",
            &format!("epoch = 1\n[servers]\ns1 = \"{}\"\ns2 = \"{}\"\n", url("s1"), url("s2")),
        );
        // The servers learn the map from the operator's command.
        let out = dlock(&["--shards", file.to_str().unwrap(), "shards", "apply"]);
        assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
        file
    })
}

#[test]
fn lease_steps_and_list_go_to_the_server_of_each_key() {
    let file = live_map().to_str().unwrap();
    let locate = |key: &str| stdout(&dlock(&["--shards", file, "shards", "locate", key])).trim().to_owned();
    let keys: Vec<String> = (0..8).map(|i| format!("cli-sharded:{i}")).collect();
    for key in &keys {
        let out = dlock(&["--shards", file, "--owner", "cli-sharded", "acquire", key, "--ttl", "30s"]);
        assert_eq!(out.status.code(), Some(0), "{key}: {}", stderr(&out));
        // Another owner is refused: the key is held where this owner took it.
        let out = dlock(&["--shards", file, "--owner", "someone-else", "acquire", key]);
        assert_eq!(out.status.code(), Some(75), "{key}: {}", stderr(&out));
    }
    let out = dlock(&["--shards", file, "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"].as_str().unwrap().starts_with("cli-sharded:"))
        .collect();
    assert_eq!(rows.len(), keys.len());
    for row in &rows {
        assert_eq!(row["server"], locate(row["key"].as_str().unwrap()).as_str(), "{row}");
    }
    assert!(rows.iter().any(|r| r["server"] == "s1") && rows.iter().any(|r| r["server"] == "s2"));
    for key in &keys {
        let out = dlock(&["--shards", file, "--owner", "cli-sharded", "renew", key, "--ttl", "1m"]);
        assert_eq!(out.status.code(), Some(0), "{key}: {}", stderr(&out));
        let out = dlock(&["--shards", file, "--owner", "cli-sharded", "release", key]);
        assert_eq!(out.status.code(), Some(0), "{key}: {}", stderr(&out));
    }
    let out = dlock(&["--shards", file, "run", "--key", "cli-sharded:run", "--", "sh", "-c", "exit 4"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}

/// Databases `names` of this binary's cluster with dlock (in schema public), and the map file
/// `file` of `epoch` over `servers` (the names given; a name without a database gets a port
/// nothing listens on).
fn apply_servers(
    rt: &tokio::runtime::Runtime,
    names: &[&str],
) -> (Vec<dlock_tests::Session>, impl Fn(&str, i64, &[&str]) -> PathBuf) {
    let cluster = Cluster::shared_named("cli-shards", &[]);
    let port = cluster.port();
    let sessions = rt.block_on(async {
        let admin = cluster.connect().await;
        let mut sessions = Vec::new();
        for db in names {
            admin.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
            let session = cluster.connect_db("postgres", db).await;
            session.batch_execute("CREATE EXTENSION dlock SCHEMA public").await.unwrap();
            sessions.push(session);
        }
        sessions
    });
    let known: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let write = move |file: &str, epoch: i64, servers: &[&str]| {
        let mut text = format!("epoch = {epoch}\n[servers]\n");
        for server in servers {
            let at = if known.iter().any(|k| k == server) { port } else { 1 };
            text += &format!(
                "{server} = \"postgresql://postgres@127.0.0.1:{at}/{server}?sslmode=disable&connect_timeout=2\"\n"
            );
        }
        map_file(file, &text)
    };
    (sessions, write)
}

#[test]
fn apply_moves_a_key_only_once_its_old_server_let_it_go_and_resumes() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (sessions, write) = apply_servers(&rt, &["mv1", "mv2", "mv3", "mv4"]);
    let sql = |s: &dlock_tests::Session, q: &str| rt.block_on(async { s.batch_execute(q).await });
    let fence = |s: &dlock_tests::Session, key: &str, owner: &str| -> Option<i64> {
        rt.block_on(async { s.try_acquire(key, owner, "1 hour").await.unwrap() })
    };
    let apply = |file: &PathBuf, extra: &[&str]| {
        let mut args = vec!["--shards", file.to_str().unwrap(), "shards", "apply"];
        args.extend_from_slice(extra);
        dlock(&args)
    };
    let one = write("mv-1.toml", 1, &["mv1", "mv2"]);
    let out = apply(&one, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("mv1: map installed") && stdout(&out).contains("complete"),
        "{}",
        stdout(&out)
    );
    // Again: nothing to do.
    let out = apply(&one, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("mv1: had the map already"), "{}", stdout(&out));

    // A key that moves from mv1 to mv3 when mv3 joins, held on mv1.
    let m1 = dlock_client::ShardMap::new(1, ["mv1", "mv2"]).unwrap();
    let m2 = dlock_client::ShardMap::new(2, ["mv1", "mv2", "mv3"]).unwrap();
    let key =
        (0..).map(|i| format!("move:{i}")).find(|k| m1.owner(k) == "mv1" && m2.owner(k) == "mv3").unwrap();
    let old = fence(&sessions[0], &key, "worker").expect("mv1 grants it");
    let two = write("mv-2.toml", 2, &["mv1", "mv2", "mv3"]);
    let out = apply(&two, &["--wait", "1s"]);
    assert_eq!(out.status.code(), Some(75), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("mv1: still holds 1 keys that moved away"), "{}", stdout(&out));
    // Neither server grants it meanwhile: mv1 lost it, mv3 waits for mv1.
    assert_eq!(fence(&sessions[2], &key, "other"), None, "gated on mv3");
    assert!(rt.block_on(sessions[0].try_acquire(&key, "other", "1 hour")).is_err(), "mv1 refuses it");
    assert!(rt.block_on(sessions[0].release(&key, "worker")).unwrap());
    let out = apply(&two, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let last: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(last, serde_json::json!({ "complete": true, "epoch": 2 }));
    let new = fence(&sessions[2], &key, "other").expect("mv3 grants it now");
    assert!(new > old && new >> 43 == 2, "{new} after {old}");

    // mv2 leaves: the servers' record names it, and the new file does not: the old file is
    // needed for its connection string.
    let three = write("mv-3.toml", 3, &["mv1", "mv3"]);
    let out = apply(&three, &[]);
    assert_eq!(out.status.code(), Some(70), "{}", stdout(&out));
    assert!(stderr(&out).contains("--previous"), "{}", stderr(&out));
    let out = apply(&three, &["--previous", two.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let status =
        rt.block_on(sessions[1].query_one("SELECT epoch, servers FROM dlock_shard_status()", &[])).unwrap();
    assert_eq!(
        (status.get::<_, i64>(0), status.get::<_, Vec<String>>(1)),
        (3, vec!["mv1".to_string(), "mv3".to_string()])
    );
    sql(&sessions[1], "SELECT 1").unwrap();

    // A server of the old map that cannot be reached: refused unless declared gone; then its
    // keys wait out the gone delay.
    let four = write("mv-4.toml", 4, &["mv1", "mv3", "mv4"]);
    let with_ghost = write("mv-3g.toml", 3, &["mv1", "mv3", "ghost"]);
    let out = apply(&four, &["--previous", with_ghost.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(70), "{}", stdout(&out));
    assert!(stderr(&out).contains("ghost cannot be reached"), "{}", stderr(&out));
    let started = std::time::Instant::now();
    let out = apply(
        &four,
        &[
            "--previous",
            with_ghost.to_str().unwrap(),
            "--gone",
            "ghost",
            "--gone-delay",
            "1s",
            "--wait",
            "20s",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("ghost: gone, left out"), "{}", stdout(&out));
    assert!(stdout(&out).contains("mv4: grants the keys from ghost (gone) in 1s"), "{}", stdout(&out));
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "the gone delay was waited out");
}
