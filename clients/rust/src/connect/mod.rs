//! From a connection string and the `PG*` environment to what connecting needs: the
//! tokio-postgres configuration, the TLS settings, and the pooler mode.

mod conninfo;
mod pooler;
mod redact;
mod tls;

use std::path::PathBuf;
use std::str::FromStr;

pub use pooler::PoolerMode;
pub use redact::redact_conninfo;
pub(crate) use tls::{SslMode, TlsSettings};

use crate::error::Error;

/// A parsed connection string, completed from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Everything tokio-postgres understands (`ssl_mode` set from [`tls`](Self::tls)).
    pub(crate) pg: tokio_postgres::Config,
    pub(crate) tls: TlsSettings,
    /// `dlock_pooler`, if the string says.
    pub(crate) pooler: Option<PoolerMode>,
}

impl Settings {
    /// Parses `url` and fills what it leaves out from the `PG*` environment, as libpq would
    /// (tokio-postgres reads no environment itself). `env` looks up one environment variable
    /// (a parameter so that tests need not change the process environment).
    pub(crate) fn parse(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let env = |name: &str| env(name).filter(|v| !v.is_empty());
        let split = conninfo::split(url).map_err(|e| Error::Config(format!("cannot parse {e}")))?;
        let mut pg = if split.rest.trim().is_empty() {
            tokio_postgres::Config::new()
        } else {
            tokio_postgres::Config::from_str(&split.rest).map_err(|e| Error::Config(e.to_string()))?
        };
        fill_from_env(&mut pg, &env)?;

        let mode = match split.get("sslmode").map(str::to_owned).or_else(|| env("PGSSLMODE")) {
            Some(mode) => mode.parse::<SslMode>().map_err(Error::Config)?,
            None => SslMode::Prefer,
        };
        let root_cert = match split.get("sslrootcert").map(str::to_owned).or_else(|| env("PGSSLROOTCERT")) {
            Some(path) if path == "system" => {
                return Err(Error::Config(
                    "sslrootcert=system is not supported: give the path of the CA's certificate file".into(),
                ));
            }
            Some(path) => Some(PathBuf::from(path)),
            // libpq's default, used only when it exists.
            None => env("HOME")
                .map(|home| PathBuf::from(home).join(".postgresql/root.crt"))
                .filter(|path| path.is_file()),
        };
        let tls = TlsSettings { mode, root_cert };
        tls.check()?;
        pg.ssl_mode(if only_unix_sockets(&pg) {
            // The server never offers TLS on a Unix socket, and libpq ignores sslmode there.
            tokio_postgres::config::SslMode::Disable
        } else {
            mode.for_tokio_postgres()
        });

        let pooler =
            split.get("dlock_pooler").map(PoolerMode::from_str).transpose().map_err(Error::Config)?;
        Ok(Settings { pg, tls, pooler })
    }
}

/// The libpq defaults tokio-postgres leaves to its caller: `PGHOST`, `PGPORT`, `PGUSER` (else
/// `USER`), `PGDATABASE`, `PGPASSWORD`, and an application name.
fn fill_from_env(
    config: &mut tokio_postgres::Config,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(), Error> {
    if config.get_hosts().is_empty() {
        match env("PGHOST") {
            // Like libpq, PGHOST may list several hosts; a value starting with '/' is a
            // Unix-socket directory (tokio-postgres makes the same distinction).
            Some(hosts) => hosts.split(',').for_each(|host| {
                config.host(host.trim());
            }),
            None => {
                config.host(if cfg!(unix) { "/var/run/postgresql" } else { "localhost" });
            }
        }
    }
    if config.get_ports().is_empty()
        && let Some(port) = env("PGPORT")
    {
        let port =
            port.parse::<u16>().map_err(|_| Error::Config(format!("PGPORT={port:?} is not a port")))?;
        config.port(port);
    }
    if config.get_user().is_none() {
        match env("PGUSER").or_else(|| env("USER")) {
            Some(user) => config.user(user),
            None => return Err(Error::Config("no user: set it in the URL, PGUSER or USER".into())),
        };
    }
    if config.get_dbname().is_none()
        && let Some(dbname) = env("PGDATABASE")
    {
        config.dbname(dbname);
    }
    if config.get_password().is_none()
        && let Some(password) = env("PGPASSWORD")
    {
        config.password(password);
    }
    if config.get_application_name().is_none() {
        config.application_name("dlock");
    }
    Ok(())
}

fn only_unix_sockets(config: &tokio_postgres::Config) -> bool {
    #[cfg(unix)]
    let unix = |host: &tokio_postgres::config::Host| matches!(host, tokio_postgres::config::Host::Unix(_));
    #[cfg(not(unix))]
    let unix = |_: &tokio_postgres::config::Host| false;
    !config.get_hosts().is_empty() && config.get_hosts().iter().all(unix)
}

#[cfg(test)]
mod tests;
