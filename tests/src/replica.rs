//! A streaming-replication standby of a `Cluster`, for failover tests: cloned with
//! `pg_basebackup -R`, started through `tests/scripts/cluster.sh`, promoted with `pg_ctl promote`, all
//! as the `postgres` OS user when we are root (like the cluster itself).

use crate::ports::free_port;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::{Cluster, Session, eventually, workspace_root};

/// Tells apart several standbys of one test binary.
static STANDBY_SEQ: AtomicUsize = AtomicUsize::new(0);
/// How long replication states (streaming, sync, caught up) may take to be reached.
const SETTLE: Duration = Duration::from_secs(30);

/// A hot standby streaming from a primary `Cluster`, in
/// `<workspace>/build/test-clusters/<name>-s<n>-<pid>` (like the cluster's directories).
///
/// Dropping it stops the server (fast) and removes its directory, unless the test is panicking
/// or `DLOCK_TEST_KEEP=1`: then the directory is kept for its `server.log`.
pub struct Standby {
    dir: PathBuf,
    port: u16,
    running: Mutex<bool>,
}

impl Standby {
    /// Clones `primary` with `pg_basebackup -R` (a `standby.signal` and a `primary_conninfo`
    /// pointing at the primary's TCP port) and starts the clone as a hot standby on a port and
    /// socket directory of its own. The primary's roles, extensions and leases come along.
    pub fn clone_of(primary: &Cluster, name: &str) -> Standby {
        let seq = STANDBY_SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = workspace_root()
            .join("build/test-clusters")
            .join(format!("{name}-s{seq}-{}", std::process::id()));
        let real = make_owned_dir(&dir);
        let data = real.join("data");
        run(
            as_owner(&pg_bin("pg_basebackup"))
                .args(["-h", "127.0.0.1", "-p", &primary.port().to_string(), "-U", "postgres", "-D"])
                .arg(&data)
                .args(["-R", "-X", "stream", "-c", "fast"]),
            "pg_basebackup",
        );
        let port = free_port();
        let conf = format!("\nport = {port}\nunix_socket_directories = '{}'\n", real.display());
        let mut current = fs::read_to_string(data.join("postgresql.conf")).expect("read postgresql.conf");
        current.push_str(&conf);
        fs::write(data.join("postgresql.conf"), current).expect("write postgresql.conf");
        let standby = Standby { dir, port, running: Mutex::new(false) };
        standby.start();
        standby
    }

    /// Starts the server (`cluster.sh start`, which waits until it accepts connections).
    pub fn start(&self) {
        let out = Command::new("bash")
            .arg(workspace_root().join("tests/scripts/cluster.sh"))
            .arg("start")
            .arg(&self.dir)
            .output()
            .expect("cannot run tests/scripts/cluster.sh start");
        assert!(
            out.status.success(),
            "cluster.sh start {} (standby) failed:\n{}\n--- server.log ---\n{}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stderr),
            self.server_log_tail(40)
        );
        *self.running.lock().unwrap() = true;
    }

    /// Stops the server: `"fast"` or `"immediate"`.
    pub fn stop(&self, mode: &str) {
        let status = Command::new("bash")
            .arg(workspace_root().join("tests/scripts/cluster.sh"))
            .args(["stop"])
            .arg(&self.dir)
            .arg(mode)
            .status()
            .expect("cannot run tests/scripts/cluster.sh stop");
        assert!(status.success(), "cluster.sh stop {mode} (standby) failed: {status}");
        *self.running.lock().unwrap() = false;
    }

    /// `pg_ctl promote -w`: ends recovery (after replaying every WAL record it has received)
    /// and returns once the server accepts writes, as Patroni does on failover.
    pub fn promote(&self) {
        run(
            as_owner(&pg_bin("pg_ctl"))
                .arg("-D")
                // The real directory: a clone under a private (0700) directory keeps its clusters
                // in /tmp behind a symlink that the `postgres` user cannot reach through.
                .arg(fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone()).join("data"))
                .args(["-w", "-t", "60", "promote"]),
            "pg_ctl promote",
        );
    }

    /// The standby's directory (its `server.log` is there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The TCP port the standby listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A new session as `postgres` (read-only until promoted).
    pub async fn connect(&self) -> Session {
        Session::connect("127.0.0.1", self.port, "postgres")
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the standby on port {}: {e}", self.port))
    }

    /// The last `lines` lines of the standby's server log, for failure messages.
    pub fn server_log_tail(&self, lines: usize) -> String {
        let log = fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        if *self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            let _ = Command::new("bash")
                .arg(workspace_root().join("tests/scripts/cluster.sh"))
                .arg("stop")
                .arg(&self.dir)
                .arg("fast")
                .status();
        }
        if std::thread::panicking() || std::env::var("DLOCK_TEST_KEEP").is_ok_and(|v| v == "1") {
            // The same marker as `Cluster`'s, so stale-cluster reaping keeps it for an hour.
            let _ = fs::write(self.dir.join("KEPT"), "kept for its server.log\n");
            eprintln!("dlock-tests: kept standby {} (server.log)", self.dir.display());
        } else if let Ok(target) = fs::read_link(&self.dir) {
            let _ = fs::remove_dir_all(target);
            let _ = fs::remove_file(&self.dir);
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Makes the primary wait for a synchronous standby (`synchronous_standby_names = '*'`, with
/// `synchronous_commit = on` a commit returns once the standby has flushed it), and waits until
/// one is attached as `sync`.
pub async fn require_sync_standby(primary: &Session) {
    alter_system(primary, "synchronous_standby_names", "*").await;
    eventually(SETTLE, "a standby streams as sync", || async move {
        let rows = primary
            .query("SELECT 1 FROM pg_catalog.pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'", &[])
            .await
            .expect("read pg_stat_replication");
        !rows.is_empty()
    })
    .await;
}

/// Waits until the standby streams from the primary (asynchronously or not).
pub async fn wait_for_streaming(primary: &Session) {
    eventually(SETTLE, "a standby streams", || async move {
        let rows = primary
            .query("SELECT 1 FROM pg_catalog.pg_stat_replication WHERE state = 'streaming'", &[])
            .await
            .expect("read pg_stat_replication");
        !rows.is_empty()
    })
    .await;
}

/// Waits until the standby has replayed everything the primary has written so far.
pub async fn wait_for_replay(primary: &Session, standby: &Session) {
    let target: String = primary
        .query_one("SELECT pg_catalog.pg_current_wal_lsn()::text", &[])
        .await
        .expect("current LSN")
        .get(0);
    let target = target.as_str();
    eventually(SETTLE, &format!("the standby replays up to {target}"), || async move {
        standby
            .query_one("SELECT pg_catalog.pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&target])
            .await
            .expect("read the replay LSN")
            .get::<_, bool>(0)
    })
    .await;
}

/// Cuts the standby off its primary while both keep running: its WAL receiver stops
/// (`primary_conninfo = ''`), so it receives nothing more, as a standby that lags behind. Waits
/// until the primary sees no standby.
pub async fn disconnect_standby(primary: &Session, standby: &Session) {
    alter_system(standby, "primary_conninfo", "").await;
    eventually(SETTLE, "the primary sees no standby", || async move {
        let rows = primary
            .query("SELECT 1 FROM pg_catalog.pg_stat_replication", &[])
            .await
            .expect("read pg_stat_replication");
        rows.is_empty()
    })
    .await;
}

/// `ALTER SYSTEM SET name = value` and a reload (ALTER SYSTEM takes no parameters: the value
/// is quoted by the server's `quote_literal`).
pub async fn alter_system(session: &Session, name: &str, value: &str) {
    let quoted: String = session
        .query_one("SELECT pg_catalog.quote_literal($1)", &[&value])
        .await
        .expect("quote_literal")
        .get(0);
    session
        .batch_execute(&format!("ALTER SYSTEM SET {name} = {quoted}"))
        .await
        .unwrap_or_else(|e| panic!("ALTER SYSTEM SET {name}: {e}"));
    session.batch_execute("SELECT pg_catalog.pg_reload_conf()").await.expect("pg_reload_conf");
}

/// Makes DIR for a server run as `postgres`, as `cluster.sh` does: when we are root, DIR is
/// given to `postgres`, or, when it cannot reach DIR (a clone under a 0700 directory), a private
/// directory in /tmp behind a symlink at DIR; returns the real directory.
fn make_owned_dir(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    if !is_root() {
        return dir.to_path_buf();
    }
    run(Command::new("chown").arg("postgres:").arg(dir), "chown postgres");
    if Command::new("runuser")
        .args(["-u", "postgres", "--", "test", "-w"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
    {
        return dir.to_path_buf();
    }
    let out = Command::new("mktemp").args(["-d", "/tmp/dlock-standby.XXXXXX"]).output().expect("mktemp");
    assert!(out.status.success(), "mktemp -d failed");
    let real = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    run(Command::new("chown").arg("postgres:").arg(&real), "chown postgres");
    fs::remove_dir(dir).unwrap_or_else(|e| panic!("cannot remove {}: {e}", dir.display()));
    std::os::unix::fs::symlink(&real, dir).unwrap_or_else(|e| panic!("cannot link {}: {e}", dir.display()));
    real
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A command run as the cluster's OS user (`postgres` when we are root).
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        // From a directory `postgres` can enter (the clone may sit under a private one).
        command.args(["-u", "postgres", "--"]).arg(program).current_dir("/");
        command
    } else {
        Command::new(program)
    }
}

fn pg_bin(name: &str) -> PathBuf {
    let pg_config =
        std::env::var("PG_CONFIG").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = Command::new(&pg_config).arg("--bindir").output().expect("run pg_config --bindir");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join(name)
}

fn run(command: &mut Command, what: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
