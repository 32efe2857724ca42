//! A throwaway PostgreSQL 15 cluster, started through `tests/scripts/cluster.sh`, with dlock created.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};

use crate::session::Session;

/// How `pg_ctl stop` ends the server: `"fast"` (clean shutdown) or `"immediate"` (a crash:
/// no shutdown checkpoint, recovery from WAL on the next start).
pub type StopMode<'a> = &'a str;

/// Set by the panic hook: a failed test keeps cluster directories (and their `server.log`).
static SOME_TEST_FAILED: AtomicBool = AtomicBool::new(false);
/// Tells apart several clusters of one test binary.
static CLUSTER_SEQ: AtomicUsize = AtomicUsize::new(0);
/// Marks a cluster directory kept after a failure.
const KEPT_MARKER: &str = "KEPT";
/// How long a kept directory survives later runs.
const KEEP_FOR: std::time::Duration = std::time::Duration::from_secs(3600);
/// The cluster shared by the tests of one binary; stopped at exit by `stop_shared_cluster`.
static SHARED: OnceLock<Cluster> = OnceLock::new();
/// Further shared clusters of one binary, by name (`Cluster::shared_named`); stopped at exit by
/// `stop_named_clusters`.
static NAMED: Mutex<Vec<(&'static str, &'static Cluster)>> = Mutex::new(Vec::new());

/// A PostgreSQL cluster in `<workspace>/build/test-clusters/<name>-<n>-<pid>`.
///
/// Dropping it stops the server (fast) and removes the directory, unless a test failed or
/// `DLOCK_TEST_KEEP=1`: then the directory is kept for its `server.log`.
pub struct Cluster {
    dir: PathBuf,
    state: Mutex<ServerState>,
}

/// What the last `cluster.sh start` printed, and whether the server is up.
struct ServerState {
    host: String,
    port: u16,
    running: bool,
    removed: bool,
}

impl Cluster {
    /// The cluster shared by all tests of this test binary, started on first use.
    pub fn shared() -> &'static Cluster {
        SHARED.get_or_init(|| {
            let cluster = Cluster::start_new("shared", &[]);
            // SAFETY: registers a plain `extern "C" fn` that takes no arguments.
            unsafe {
                libc::atexit(stop_shared_cluster);
            }
            cluster
        })
    }

    /// A further cluster shared by the tests of this test binary that ask for `name`, started on
    /// first use with `conf` lines appended to its `postgresql.conf` (later calls' `conf` is
    /// ignored), and stopped when the binary exits, like `shared()`. For running the same tests
    /// on a differently configured server (e.g. with `shared_preload_libraries`).
    pub fn shared_named(name: &'static str, conf: &[&str]) -> &'static Cluster {
        let mut named = NAMED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, cluster)) = named.iter().find(|(n, _)| *n == name) {
            return cluster;
        }
        let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start_new(name, conf)));
        if named.is_empty() {
            // SAFETY: registers a plain `extern "C" fn` that takes no arguments.
            unsafe {
                libc::atexit(stop_named_clusters);
            }
        }
        named.push((name, cluster));
        cluster
    }

    /// Starts a new cluster of its own (for tests that crash or restart the server).
    /// `conf` lines are appended to its `postgresql.conf`.
    pub fn start_new(name: &str, conf: &[&str]) -> Cluster {
        install_failure_hook();
        ensure_extension_installed();
        let root = clusters_root();
        fs::create_dir_all(&root).unwrap_or_else(|e| panic!("cannot create {}: {e}", root.display()));
        reap_stale_clusters(&root);
        let seq = CLUSTER_SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = root.join(format!("{name}-{seq}-{}", std::process::id()));
        let (host, port) = run_cluster_sh_start(&dir, conf);
        let cluster =
            Cluster { dir, state: Mutex::new(ServerState { host, port, running: true, removed: false }) };
        cluster.create_extension();
        cluster
    }

    /// Starts the server again on the same directory (after `stop`): a restart, with crash
    /// recovery when it was stopped `"immediate"`.
    pub fn start(&self) {
        let (host, port) = run_cluster_sh_start(&self.dir, &[]);
        {
            let mut state = self.state.lock().unwrap();
            state.host = host;
            state.port = port;
            state.running = true;
        }
        self.create_extension();
    }

    /// Stops the server: `mode` is `"fast"` or `"immediate"` (a simulated crash).
    pub fn stop(&self, mode: StopMode<'_>) {
        assert!(
            mode == "fast" || mode == "immediate",
            "stop mode must be \"fast\" or \"immediate\", not {mode:?}"
        );
        let status = Command::new("bash")
            .arg(cluster_sh())
            .arg("stop")
            .arg(&self.dir)
            .arg(mode)
            .status()
            .expect("cannot run tests/scripts/cluster.sh stop");
        assert!(status.success(), "cluster.sh stop {mode} failed: {status}");
        self.state.lock().unwrap().running = false;
    }

    /// The cluster's directory (its `server.log` is there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.state.lock().unwrap().port
    }

    /// A new session as the bootstrap superuser `postgres`.
    pub async fn connect(&self) -> Session {
        self.connect_as("postgres").await
    }

    /// A new session logging in as `role` (trust authentication: any LOGIN role works).
    pub async fn connect_as(&self, role: &str) -> Session {
        self.connect_db(role, "postgres").await
    }

    /// A new session logging in as `role` to database `dbname`.
    pub async fn connect_db(&self, role: &str, dbname: &str) -> Session {
        let (host, port) = {
            let state = self.state.lock().unwrap();
            (state.host.clone(), state.port)
        };
        Session::connect_db(&host, port, role, dbname)
            .await
            .unwrap_or_else(|e| panic!("cannot connect as {role} to {dbname} at {host}:{port}: {e}"))
    }

    /// A plain `tokio_postgres::Client` as `postgres`, its backend pid, and the task that drives
    /// its connection: aborting that task closes the socket, as a client that crashes or loses
    /// its network would.
    pub async fn connect_client(&self) -> (tokio_postgres::Client, i32, tokio::task::JoinHandle<()>) {
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(self.port()).user("postgres").dbname("postgres");
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.expect("connect");
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
        (client, pid, driver)
    }

    /// A new listening session as `postgres` (see `Listener`).
    pub async fn listen(&self) -> crate::Listener {
        let (host, port) = {
            let state = self.state.lock().unwrap();
            (state.host.clone(), state.port)
        };
        crate::Listener::connect(&host, port, "postgres")
            .await
            .unwrap_or_else(|e| panic!("cannot connect a listener to {host}:{port}: {e}"))
    }

    /// Puts the hostile-schema net's traps (`tests/fixtures/hostile/`) into database `dbname`:
    /// operators and functions named like pg_catalog's, in schema `public`, that log `dlock-trap sprung: ...` when they run inside one of dlock's statements (or in
    /// a session with `dlock_trap.armed = on`). The database's search_path is left alone.
    pub fn plant_traps(&self, dbname: &str) {
        let out = Command::new("bash")
            .arg(cluster_sh())
            .arg("plant")
            .arg(&self.dir)
            .arg(dbname)
            .output()
            .expect("cannot run tests/scripts/cluster.sh plant");
        assert!(
            out.status.success(),
            "cluster.sh plant {dbname} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The lines of the server log that say a trap of the hostile-schema net sprang in
    /// database `dbname`.
    pub fn sprung_traps(&self, dbname: &str) -> Vec<String> {
        let log = fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let marker = format!("database {dbname})");
        log.lines()
            .filter(|l| l.contains("dlock-trap sprung") && l.contains(&marker))
            .map(str::to_string)
            .collect()
    }

    /// The last `lines` lines of the server log, for failure messages.
    pub fn server_log_tail(&self, lines: usize) -> String {
        let log = fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `CREATE EXTENSION IF NOT EXISTS dlock SCHEMA public` (or, with `DLOCK_SQL_EDITION` naming
    /// the SQL-only edition's one-file install, that file), from a thread of its own so that it
    /// works from synchronous code and from inside any tokio runtime alike.
    fn create_extension(&self) {
        let (host, port) = {
            let state = self.state.lock().unwrap();
            (state.host.clone(), state.port)
        };
        let result = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime")
                .block_on(async move {
                    let session = Session::connect(&host, port, "postgres").await?;
                    if let Some(script) = sql_edition_script() {
                        // The SQL-only edition instead (its one-file install, into public), once.
                        let installed: bool = session
                            .query_one("SELECT to_regnamespace('dlock_internal') IS NOT NULL", &[])
                            .await?
                            .get(0);
                        if installed {
                            return Ok(());
                        }
                        return session.batch_execute(&format!("SET search_path = public;\n{script}")).await;
                    }
                    // Armed, the hostile-schema net reports any trap the install script runs.
                    session
                        .batch_execute(
                            "SET dlock_trap.armed = on; CREATE EXTENSION IF NOT EXISTS dlock SCHEMA public; \
                             RESET dlock_trap.armed",
                        )
                        .await
                })
        })
        .join()
        .expect("CREATE EXTENSION thread panicked");
        if let Err(e) = result {
            panic!(
                "CREATE EXTENSION dlock SCHEMA public failed in {}: {e:?}\n--- server.log ---\n{}",
                self.dir.display(),
                self.server_log_tail(40)
            );
        }
    }

    /// Stops the server (fast) if it runs, and removes the directory unless it must be kept.
    fn shut_down(&self) {
        let (running, removed) = {
            let state = self.state.lock().unwrap();
            (state.running, state.removed)
        };
        if removed {
            return;
        }
        if running {
            let _ = Command::new("bash").arg(cluster_sh()).arg("stop").arg(&self.dir).arg("fast").status();
            self.state.lock().unwrap().running = false;
        }
        let failed = SOME_TEST_FAILED.load(Ordering::SeqCst) || std::thread::panicking();
        if failed || std::env::var("DLOCK_TEST_KEEP").is_ok_and(|v| v == "1") {
            let _ = fs::write(self.dir.join(KEPT_MARKER), "kept for its server.log\n");
            eprintln!(
                "dlock-tests: kept cluster {} (server.log); last lines:\n{}",
                self.dir.display(),
                self.server_log_tail(30)
            );
        } else {
            remove_cluster_dir(&self.dir);
        }
        self.state.lock().unwrap().removed = true;
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// `atexit` handler: the shared cluster is a `static`, which Rust never drops.
extern "C" fn stop_shared_cluster() {
    if let Some(cluster) = SHARED.get() {
        let _ = std::panic::catch_unwind(|| cluster.shut_down());
    }
}

/// `atexit` handler for the clusters of `Cluster::shared_named` (leaked, so never dropped).
extern "C" fn stop_named_clusters() {
    let named = NAMED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for (_, cluster) in named.iter() {
        let _ = std::panic::catch_unwind(|| cluster.shut_down());
    }
}

/// Records that a test failed (so cluster directories are kept), then reports as usual.
fn install_failure_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            SOME_TEST_FAILED.store(true, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// The workspace root: the parent of this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn cluster_sh() -> PathBuf {
    workspace_root().join("tests/scripts/cluster.sh")
}

fn clusters_root() -> PathBuf {
    workspace_root().join("build/test-clusters")
}

/// The `pg_config` of the PostgreSQL under test (`$PG_CONFIG`, as in the Makefile).
fn pg_config() -> String {
    std::env::var("PG_CONFIG").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into())
}

fn pg_config_dir(flag: &str) -> PathBuf {
    let pg_config = pg_config();
    let out = Command::new(&pg_config)
        .arg(flag)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {pg_config} {flag}: {e}"));
    assert!(out.status.success(), "{pg_config} {flag} failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Fails (never skips) when dlock is not installed into the PostgreSQL under test.
fn ensure_extension_installed() {
    if sql_edition_script().is_some() {
        return; // the SQL edition needs no library
    }
    let control = pg_config_dir("--sharedir").join("extension/dlock.control");
    let library = pg_config_dir("--pkglibdir").join("dlock.so");
    for file in [&control, &library] {
        assert!(
            file.exists(),
            "dlock is not installed: {} is missing. Run `make install` first \
             (the integration tests need the extension installed into the PostgreSQL of {}).",
            file.display(),
            pg_config()
        );
    }
}

/// `cluster.sh start DIR conf...`; returns (host, port) from the `export PGHOST=... PGPORT=...`
/// line it prints. The tests connect over TCP to 127.0.0.1 (cancel requests too).
fn run_cluster_sh_start(dir: &Path, conf: &[&str]) -> (String, u16) {
    let out = Command::new("bash")
        .arg(cluster_sh())
        .arg("start")
        .arg(dir)
        .args(conf)
        .output()
        .expect("cannot run tests/scripts/cluster.sh start");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cluster.sh start {} failed ({}):\n{stdout}\n{stderr}\n--- server.log ---\n{}",
        dir.display(),
        out.status,
        fs::read_to_string(dir.join("server.log")).unwrap_or_default()
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("export "))
        .unwrap_or_else(|| panic!("cluster.sh start printed no export line:\n{stdout}"));
    let mut port = None;
    for assignment in line.split_whitespace().skip(1) {
        if let Some(("PGPORT", value)) = assignment.split_once('=') {
            port = value.parse::<u16>().ok();
        }
    }
    let port = port.unwrap_or_else(|| panic!("no PGPORT in {line:?}"));
    ("127.0.0.1".to_string(), port)
}

/// Stops clusters left behind by test processes that no longer exist (killed before their
/// cleanup ran; directory names end in `-<pid>`) and removes them, except directories kept
/// after a failure, which stay for an hour.
fn reap_stale_clusters(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ =
            Command::new("bash").arg(cluster_sh()).arg("stop").arg(entry.path()).arg("immediate").status();
        let kept_recently = fs::metadata(entry.path().join(KEPT_MARKER))
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < KEEP_FOR));
        if !kept_recently {
            remove_cluster_dir(&entry.path());
        }
    }
}

/// Removes DIR and, when cluster.sh made DIR a symlink into /tmp, its target.
fn remove_cluster_dir(dir: &Path) {
    if let Ok(target) = fs::read_link(dir) {
        let _ = fs::remove_dir_all(target);
        let _ = fs::remove_file(dir);
    } else {
        let _ = fs::remove_dir_all(dir);
    }
}

/// Whether the suites run against the SQL-only edition (`DLOCK_SQL_EDITION`): for what a test
/// observes of the server's internals (which lock shows a waiter), never for what it asserts.
pub fn sql_edition() -> bool {
    std::env::var_os("DLOCK_SQL_EDITION").is_some_and(|p| !p.is_empty())
}

/// The SQL-only edition's one-file install, when `DLOCK_SQL_EDITION` names it (`make sql-edition`
/// prints its path): clusters then get that edition instead of the native extension.
fn sql_edition_script() -> Option<String> {
    let path = std::env::var_os("DLOCK_SQL_EDITION").filter(|p| !p.is_empty())?;
    Some(fs::read_to_string(&path).unwrap_or_else(|e| panic!("DLOCK_SQL_EDITION={path:?}: {e}")))
}
