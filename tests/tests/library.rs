//! Replacing `dlock.so` under a running preloaded server (as `make install` and the package do):
//! PostgreSQL keeps the library it preloaded for the server's life, so new backends keep running
//! it — they never mix a new library with the old one's shared memory. And a second dlock
//! library loaded into a backend (from another path) runs without shared memory: durable leases
//! work, fast mode says why it is off, settings are read from the first library's, and the first
//! library's fast leases are untouched.
//!
//! A binary of its own: it swaps the installed library for a moment, and its two tests take
//! turns (`LIBRARY`), so that the copy of the second never reads the swapped-in file.

use std::path::PathBuf;
use std::process::Command;

use dlock_tests::{Cluster, SqlState, expect_sqlstate};

/// Held by each test while it uses the installed `dlock.so`.
static LIBRARY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const PRELOAD: &str = "shared_preload_libraries = 'dlock'";
const FAST_DELAY: &str = "dlock.fast_max_ttl = 1";

fn pkglibdir() -> PathBuf {
    let pg_config =
        std::env::var("PG_CONFIG").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = Command::new(pg_config).arg("--pkglibdir").output().expect("pg_config runs");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Puts the installed `dlock.so` back when dropped, whatever happened.
struct Swapped {
    installed: PathBuf,
    aside: PathBuf,
}

impl Swapped {
    /// Moves the installed library aside (as `make install` does) and puts `replacement` there.
    fn with(replacement: &[u8]) -> Swapped {
        let installed = pkglibdir().join("dlock.so");
        let aside = pkglibdir().join("dlock.so.swapped-by-test");
        std::fs::rename(&installed, &aside).expect("move dlock.so aside");
        std::fs::write(&installed, replacement).expect("write the replacement");
        Swapped { installed, aside }
    }
}

impl Drop for Swapped {
    fn drop(&mut self) {
        let _ = std::fs::rename(&self.aside, &self.installed);
    }
}

async fn fast_acquire(
    s: &dlock_tests::Session,
    function: &str,
    key: &str,
) -> Result<Option<i64>, dlock_tests::Error> {
    s.query_one(&format!("SELECT {function}($1, 'o', '1 second', wait => '5 seconds')"), &[&key])
        .await
        .map(|r| r.get(0))
}

#[tokio::test]
async fn a_preloaded_server_keeps_its_library_until_restart() {
    let _turn = LIBRARY.lock().await;
    let cluster = Cluster::start_new("library-swap", &[PRELOAD, FAST_DELAY]);
    let before = cluster.connect().await;
    assert!(before.try_acquire("k", "o", "1 hour").await.unwrap().is_some());
    assert!(fast_acquire(&before, "dlock_fast_acquire", "fast").await.unwrap().is_some());

    // Not a library at all: a backend that loaded it would fail every dlock call.
    let swapped = Swapped::with(b"not a shared library");
    let after = cluster.connect().await;
    assert!(
        after.try_acquire("k2", "o", "1 hour").await.unwrap().is_some(),
        "a new backend runs the preloaded code"
    );
    assert!(
        fast_acquire(&after, "dlock_fast_acquire", "fast2").await.unwrap().is_some(),
        "with its shared memory"
    );
    let row = after.lease("k").await.unwrap().expect("the lease taken before the swap");
    assert_eq!(row.owner.as_deref(), Some("o"));
    drop(swapped);

    // A restart loads what is installed.
    cluster.stop("fast");
    cluster.start();
    assert!(cluster.connect().await.try_acquire("k3", "o", "1 hour").await.unwrap().is_some());
}

/// Removes a copied library when dropped.
struct Copy(PathBuf);

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
async fn a_second_dlock_library_in_a_backend_runs_without_shared_memory() {
    let _turn = LIBRARY.lock().await;
    let cluster = Cluster::start_new("library-second", &[PRELOAD, FAST_DELAY]);
    let copy = Copy(pkglibdir().join("dlock_second_copy.so"));
    std::fs::copy(pkglibdir().join("dlock.so"), &copy.0).expect("copy dlock.so");
    let admin = cluster.connect().await;
    admin
        .batch_execute(
            "CREATE SCHEMA second; \
             CREATE FUNCTION second.acquire(text, text, interval, interval DEFAULT '0') RETURNS bigint \
               LANGUAGE c AS 'dlock_second_copy', 'dlock_acquire_wrapper'; \
             CREATE FUNCTION second.fast_acquire(text, text, interval, interval DEFAULT '0') RETURNS bigint \
               LANGUAGE c AS 'dlock_second_copy', 'dlock_fast_acquire_wrapper';",
        )
        .await
        .unwrap();
    admin.batch_execute("ALTER SYSTEM SET dlock.max_ttl = '1 hour'").await.unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").await.unwrap();

    let s = cluster.connect().await;
    // The first library's fast lease, taken before the second library is loaded.
    assert!(fast_acquire(&s, "dlock_fast_acquire", "fast").await.unwrap().is_some());
    let fence: Option<i64> =
        s.query_one("SELECT second.acquire('k', 'o', '10 minutes')", &[]).await.unwrap().get(0);
    assert!(fence.is_some(), "durable leases work through the second library");
    let refused = s.query_one("SELECT second.fast_acquire('fast', 'o', '1 second')", &[]).await;
    expect_sqlstate(refused, &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, "fast mode in the second library");
    // Its settings are the first library's (reloaded to 1 hour).
    expect_sqlstate(
        s.query_one("SELECT second.acquire('k2', 'o', '2 hours')", &[]).await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "a ttl above dlock.max_ttl",
    );
    // The first library in the same backend still has its shared memory: the fast lease taken
    // before is still held.
    let held: bool = s
        .query_one("SELECT count(*) = 1 FROM dlock_fast_locks() WHERE key = 'fast'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(held, "the first library's fast lease is untouched");
    assert!(
        cluster.server_log_tail(200).contains("a second dlock library was loaded in this backend"),
        "the server log says so"
    );
}
