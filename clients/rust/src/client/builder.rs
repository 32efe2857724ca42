//! Describing a client before making it: the connection string, a transaction pooler in
//! between, the pool's size.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use crate::client::{Client, DEFAULT_POOL_SIZE};
use crate::connect::{PoolerMode, Settings};
use crate::error::Error;
use crate::waiting::{DEFAULT_MAX_POLL_INTERVAL, Listener, Waits};

/// A client being described: `Client::builder(url).pooler(PoolerMode::Transaction).connect()`.
///
/// The connection string is a libpq-style URL or `key=value` string, completed from the `PG*`
/// environment (see [`Client::connect`]). Besides what tokio-postgres understands it may say:
/// - `sslmode`: `disable`, `prefer` (the default: TLS if the server offers it), `require`
///   (TLS, the certificate not verified — unless a root certificate is given, as with libpq),
///   `verify-ca` (the certificate must chain to the root certificate) or `verify-full` (and
///   name the host); `PGSSLMODE` if the string does not say;
/// - `sslrootcert`: the path of the root certificate(s) (PEM) to verify with; `PGSSLROOTCERT`,
///   else `~/.postgresql/root.crt` if it exists, as with libpq (`system` is not supported).
///   Verification is WebPKI's (rustls): a self-signed server certificate can be its own root
///   only if it is not marked as a CA (`CA:TRUE`, which `openssl req -x509` sets by default);
/// - `dlock_pooler`: `session` (the default) or `transaction` (see [`pooler`](Self::pooler)).
#[derive(Debug, Clone)]
#[must_use = "a client builder does nothing until build() or connect()"]
pub struct ClientBuilder {
    url: String,
    pooler: Option<PoolerMode>,
    pool_size: usize,
    max_poll_interval: Duration,
    /// The shard map's epoch a sharded client routes with (`dlock.shard_epoch` of its sessions).
    shard_epoch: Option<i64>,
}

impl ClientBuilder {
    pub(crate) fn new(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            pooler: None,
            pool_size: DEFAULT_POOL_SIZE - 1,
            max_poll_interval: DEFAULT_MAX_POLL_INTERVAL,
            shard_epoch: None,
        }
    }

    /// Every session says it routes with shard map `epoch` (`dlock.shard_epoch`, in the startup
    /// packet's options): a server with an older map refuses its grants (0F000).
    pub(crate) fn shard_epoch(mut self, epoch: i64) -> Self {
        self.shard_epoch = Some(epoch);
        self
    }

    /// What pools the server connections behind the client's connections. Set
    /// [`PoolerMode::Transaction`] behind pgbouncer's `pool_mode = transaction` (or any pooler
    /// that lends a server connection per transaction); this wins over `dlock_pooler` in the
    /// connection string, which is taken when this is not called.
    pub fn pooler(mut self, mode: PoolerMode) -> Self {
        self.pooler = Some(mode);
        self
    }

    /// How many pooled connections the client opens at most (default 15). In
    /// [`PoolerMode::Session`] its waits share one listener connection more.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Behind a transaction pooler, the longest pause between two tries of a waiting acquire
    /// (default 250 ms): how late a waiter may notice a release, against how many tries per
    /// second a waiting key costs the server. Pauses start at 10 ms and double up to it.
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.max_poll_interval = interval;
        self
    }

    /// The client, opening no connection until the first lock call: [`Error::Config`] if the
    /// connection string makes no sense or the root certificate cannot be read.
    pub fn build(self) -> Result<Client, Error> {
        self.build_with_env(|name| std::env::var(name).ok())
    }

    /// The client, after opening one connection to check the address, TLS and credentials.
    pub async fn connect(self) -> Result<Client, Error> {
        let client = self.build()?;
        drop(client.pool.get().await?);
        Ok(client)
    }

    /// [`build`](Self::build) with `env` looking up the environment.
    fn build_with_env(self, env: impl Fn(&str) -> Option<String>) -> Result<Client, Error> {
        if self.pool_size == 0 {
            return Err(Error::Config("a pool of no connections cannot lock anything".into()));
        }
        let mut settings = Settings::parse(&self.url, env)?;
        if let Some(epoch) = self.shard_epoch {
            let given = settings.pg.get_options().map(|o| format!("{o} ")).unwrap_or_default();
            settings.pg.options(format!("{given}-c dlock.shard_epoch={epoch}"));
        }
        let pooler = self.pooler.or(settings.pooler).unwrap_or_default();
        let tls = settings.tls.connector()?;
        let manager = Manager::from_config(
            settings.pg.clone(),
            tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .build()
            .map_err(|e| Error::Config(format!("cannot build the connection pool: {e}")))?;
        let waits = if pooler.is_transaction() {
            // Notifications cannot pass a transaction pooler: waits retry.
            Waits::polling(self.max_poll_interval)
        } else {
            Waits::listening(Listener::new(settings.pg, tls))
        };
        Ok(Client::new(pool, pooler, Some(waits)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "USER").then(|| "u".to_owned())
    }

    #[test]
    fn the_builders_pooler_wins_over_the_strings_which_wins_over_the_default() {
        let build = |builder: ClientBuilder| builder.build_with_env(env).unwrap().pooler();
        assert_eq!(build(ClientBuilder::new("host=db")), PoolerMode::Session);
        assert_eq!(build(ClientBuilder::new("host=db dlock_pooler=transaction")), PoolerMode::Transaction);
        let url = "postgresql://db/x?dlock_pooler=transaction";
        assert_eq!(build(ClientBuilder::new(url).pooler(PoolerMode::Session)), PoolerMode::Session);
        assert_eq!(
            build(ClientBuilder::new("host=db").pooler(PoolerMode::Transaction)),
            PoolerMode::Transaction
        );
    }

    #[test]
    fn a_pool_of_nothing_and_bad_strings_are_config_errors() {
        assert!(matches!(
            ClientBuilder::new("host=db").pool_size(0).build_with_env(env),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            ClientBuilder::new("host=db sslmode=verify-full").build_with_env(env),
            Err(Error::Config(_))
        ));
        let pool = ClientBuilder::new("host=db").pool_size(3).build_with_env(env).unwrap();
        assert_eq!(pool.pool().status().max_size, 3);
    }
}
