//! A pgbouncer in front of a test cluster (Debian package `pgbouncer`), for the tests of dlock
//! behind a connection pooler.

use crate::ports::free_port;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio_postgres::{NoTls, SimpleQueryMessage};

use crate::{Cluster, eventually};

/// Generous limit on anything that should happen promptly (never a measurement).
const PROMPTLY: Duration = Duration::from_secs(20);
/// The pgbouncer binary (Debian package `pgbouncer`); `$PGBOUNCER` overrides.
const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// A pgbouncer in front of a cluster, in transaction pooling mode with `pool_size` server
/// connections, listening on a free loopback port. Killed (and reaped) when dropped; its
/// files live in the cluster's directory (`pgbouncer-<name>/`, log included).
pub struct Pgbouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Pgbouncer {
    pub async fn start(cluster: &Cluster, name: &str, pool_size: u32) -> Pgbouncer {
        let dir = cluster.dir().join(format!("pgbouncer-{name}"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let port = free_port();
        let userlist = dir.join("userlist.txt");
        fs::write(&userlist, "\"postgres\" \"\"\n").expect("write userlist.txt");
        // pgbouncer refuses to run as root: started as root it switches to `postgres` itself.
        let as_user = if running_as_root() { "user = postgres\n" } else { "" };
        let ini = format!(
            "[databases]\n\
             postgres = host=127.0.0.1 port={server} dbname=postgres\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {userlist}\n\
             admin_users = postgres\n\
             pool_mode = transaction\n\
             default_pool_size = {pool_size}\n\
             min_pool_size = 0\n\
             reserve_pool_size = 0\n\
             max_client_conn = 50\n\
             {as_user}",
            server = cluster.port(),
            userlist = userlist.display(),
        );
        let ini_path = dir.join("pgbouncer.ini");
        fs::write(&ini_path, ini).expect("write pgbouncer.ini");
        let log = fs::File::create(dir.join("pgbouncer.log")).expect("create pgbouncer.log");
        let program = std::env::var("PGBOUNCER").unwrap_or_else(|_| PGBOUNCER.into());
        let child = Command::new(&program)
            .arg(&ini_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program} (Debian package pgbouncer): {e}"));
        let mut bouncer = Pgbouncer { child, port, dir };
        let what = format!("pgbouncer listens on 127.0.0.1:{port}");
        eventually(PROMPTLY, &what, || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
        assert!(bouncer.child.try_wait().expect("pgbouncer status").is_none(), "{}", bouncer.log());
        bouncer
    }

    /// The port the pooler listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `postgresql://` URL of database `postgres` through the pooler.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A new client connection to `dbname` through the pooler (`pgbouncer`: its admin console).
    pub async fn client(&self, dbname: &str) -> tokio_postgres::Client {
        connect(self.port, dbname).await
    }

    /// One row of the admin console's `SHOW POOLS` for database `postgres`: column → value.
    pub async fn pool(&self) -> Vec<(String, String)> {
        let admin = connect(self.port, "pgbouncer").await;
        let messages = admin.simple_query("SHOW POOLS").await.expect("SHOW POOLS");
        for message in messages {
            if let SimpleQueryMessage::Row(row) = message
                && row.get("database") == Some("postgres")
            {
                return row
                    .columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name().to_string(), row.get(i).unwrap_or("").to_string()))
                    .collect();
            }
        }
        panic!("SHOW POOLS has no row for database postgres");
    }

    /// A counter of `SHOW POOLS` (`cl_active`, `cl_waiting`, `sv_active`, `sv_idle`, ...).
    pub async fn pool_count(&self, column: &str) -> i64 {
        let pool = self.pool().await;
        let value =
            pool.iter().find(|(c, _)| c == column).unwrap_or_else(|| panic!("no {column} in {pool:?}"));
        value.1.parse().unwrap_or_else(|_| panic!("{column} = {:?} is not a number", value.1))
    }

    /// The admin console command `command` (e.g. `RECONNECT postgres`).
    pub async fn admin(&self, command: &str) {
        let admin = connect(self.port, "pgbouncer").await;
        admin.simple_query(command).await.unwrap_or_else(|e| panic!("{command}: {e}"));
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} ---\n{}", self.dir.join("pgbouncer.log").display(), self.log());
        }
    }
}

/// Whether this process runs as root (`/proc/self` belongs to the effective user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

async fn connect(port: u16, dbname: &str) -> tokio_postgres::Client {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(port).user("postgres").dbname(dbname).application_name("dlock-pgbouncer");
    let (client, connection) =
        config.connect(NoTls).await.unwrap_or_else(|e| panic!("cannot connect to {dbname} via :{port}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}
