//! The client: a connection pool and the owner identity every lease of this client is taken as.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::builder::LockBuilder;
use crate::error::Error;
use crate::guard::Lease;
use crate::sql;
use crate::waiting::Waits;

/// How many connections a client made by [`Client::connect`] opens at most: a pool of 15 and
/// the listener its waits share (opened by the first wait).
pub const DEFAULT_POOL_SIZE: usize = 16;

/// Longest owner string the server accepts, in bytes.
const MAX_OWNER_BYTES: usize = 256;
/// How much of the host name goes into a generated owner, so that it always fits.
const MAX_HOST_BYTES: usize = 64;

/// A dlock client: a pool of connections to one database and one owner identity.
///
/// Cloning is cheap and shares both: clones are the same owner, so a lock taken through one
/// clone is reentrant through another (same fence, one more hold).
#[derive(Clone)]
pub struct Client {
    pub(crate) pool: Pool,
    pub(crate) owner: Arc<str>,
    /// The listener and local lines of waits; `None` for a pool of unknown origin.
    pub(crate) waits: Option<Arc<Waits>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the database named by `url`: a libpq-style URL
    /// (`postgresql://user@host:5432/db`) or `key=value` string (`host=/run/postgresql user=app`).
    /// Parts it leaves out come from `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE` and `PGPASSWORD`
    /// as with libpq (user defaults to `$USER`); an empty `url` takes everything from them.
    ///
    /// Opens one connection of the pool (without TLS) to check the address and credentials now
    /// rather than at the first lock: [`Error::Connection`] if it cannot, [`Error::Config`] if
    /// `url` makes no sense. The client opens at most [`DEFAULT_POOL_SIZE`] connections,
    /// whatever the number of waiting acquires: they share one listener connection.
    pub async fn connect(url: &str) -> Result<Client, Error> {
        let client = Client::connect_lazy(url)?;
        drop(client.pool.get().await?);
        Ok(client)
    }

    /// Like [`connect`](Self::connect), but opens no connection until the first lock call.
    pub fn connect_lazy(url: &str) -> Result<Client, Error> {
        let config = pg_config(url, |name| std::env::var(name).ok())?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(DEFAULT_POOL_SIZE - 1)
            .build()
            .map_err(|e| Error::Config(format!("cannot build the connection pool: {e}")))?;
        Ok(Client { pool, owner: Arc::from(generate_owner()), waits: Some(Waits::new(config)) })
    }

    /// A client on a pool you built yourself (size, TLS, hooks are yours), with a fresh owner.
    /// Having no listener, its waits wait on the server, each holding a pooled connection for
    /// its length (as [`LockBuilder::server_queue`]): size the pool for them.
    pub fn from_pool(pool: Pool) -> Client {
        Client { pool, owner: Arc::from(generate_owner()), waits: None }
    }

    /// Like [`from_pool`](Self::from_pool), with waits that hold no pooled connection: they
    /// share one listener connection opened from `listener` (without TLS) on the first wait,
    /// as a client from [`connect`](Self::connect) does. Count it in your connection budget.
    pub fn from_pool_with_listener(pool: Pool, listener: tokio_postgres::Config) -> Client {
        Client { pool, owner: Arc::from(generate_owner()), waits: Some(Waits::new(listener)) }
    }

    /// The same pool under another owner identity (e.g. a stable name for one worker). Owners
    /// must be unguessable to others: whoever knows an owner string (and has the role) can
    /// renew and release its leases. At most 256 bytes, not empty (the server checks).
    pub fn with_owner(&self, owner: impl Into<String>) -> Client {
        Client { pool: self.pool.clone(), owner: Arc::from(owner.into()), waits: self.waits.clone() }
    }

    /// The owner identity every lease of this client is taken as: `host:pid:random` unless set
    /// with [`with_owner`](Self::with_owner).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Starts describing a lock on `key`; finish with [`LockBuilder::acquire`] or
    /// [`LockBuilder::try_acquire`]. Defaults: 30 s ttl renewed by a watchdog, no wait.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), key.into())
    }

    /// Frees `key` whoever holds it (`dlock_force_release`): `true` if it was held. For
    /// administrators: the role must be a `dlock_admin` member or a superuser, else
    /// [`Error::PermissionDenied`]. The holder finds out at its next renewal.
    pub async fn force_release(&self, key: &str) -> Result<bool, Error> {
        let connection = self.pool.get().await?;
        let statement = connection.prepare_cached(sql::FORCE_RELEASE).await?;
        Ok(connection.query_one(&statement, &[&key]).await?.try_get(0)?)
    }

    /// Runs `work` while holding the lock: acquires it (as [`LockBuilder::acquire`] would:
    /// `Timeout`/`NotAcquired` when it cannot), passes `work` a [`Lease`] whose
    /// [`lost`](Lease::lost) token fires if the lease is lost meanwhile, releases afterwards,
    /// and returns `work`'s output — or [`Error::LockLost`] if the lease was lost before `work`
    /// ended (whatever `work` returned: its effects may have overlapped another holder's).
    ///
    /// `lock` is a key (`"jobs:nightly"`) or a configured builder (`client.lock(k).ttl(..)`);
    /// a builder keeps the client it was made from.
    pub async fn with_lock<L, F, Fut, T>(&self, lock: L, work: F) -> Result<T, Error>
    where
        L: IntoLockBuilder,
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = lock.into_lock_builder(self).acquire().await?;
        let lease = guard.lease();
        let output = work(lease.clone()).await;
        let lost_during_work = !lease.is_held();
        // Released even when lost: a false answer is harmless, and it ends a hold we might
        // still have if the loss was only suspected (renewals failing on a broken connection).
        let still_ours = match guard.release().await {
            Ok(still_ours) => still_ours,
            Err(e) => {
                // The work finished while the lease was live as far as we know; the lease ends
                // by its ttl (or with its session) without us.
                tracing::warn!(key = lease.key(), error = %e, "dlock: release after with_lock failed");
                true
            }
        };
        if lost_during_work || !still_ours { Err(Error::LockLost) } else { Ok(output) }
    }
}

/// What [`Client::with_lock`] accepts: a key, or a configured [`LockBuilder`].
pub trait IntoLockBuilder {
    /// The builder to acquire with (a key gets the defaults of [`Client::lock`]).
    fn into_lock_builder(self, client: &Client) -> LockBuilder;
}

impl IntoLockBuilder for LockBuilder {
    fn into_lock_builder(self, _client: &Client) -> LockBuilder {
        self
    }
}

impl IntoLockBuilder for &str {
    fn into_lock_builder(self, client: &Client) -> LockBuilder {
        client.lock(self)
    }
}

impl IntoLockBuilder for String {
    fn into_lock_builder(self, client: &Client) -> LockBuilder {
        client.lock(self)
    }
}

impl IntoLockBuilder for &String {
    fn into_lock_builder(self, client: &Client) -> LockBuilder {
        client.lock(self.as_str())
    }
}

/// `host:pid:random`: readable in `dlock_locks` (which host and process holds a key), and
/// unguessable thanks to 122 random bits, so no one else can renew or release by accident.
fn generate_owner() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = truncate_to_char_boundary(if host.is_empty() { "unknown" } else { &host }, MAX_HOST_BYTES);
    let owner = format!("{host}:{}:{}", std::process::id(), uuid::Uuid::new_v4().simple());
    debug_assert!(owner.len() <= MAX_OWNER_BYTES);
    owner
}

fn truncate_to_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Parses `url` and fills what it leaves out from the `PG*` environment, as libpq would
/// (tokio-postgres reads no environment itself).
/// `env` looks up one environment variable (a parameter so that tests need not change the
/// process environment).
fn pg_config(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<tokio_postgres::Config, Error> {
    let mut config = if url.trim().is_empty() {
        tokio_postgres::Config::new()
    } else {
        tokio_postgres::Config::from_str(url).map_err(|e| Error::Config(e.to_string()))?
    };
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
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
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_owner_is_host_pid_random_and_unique() {
        let a = generate_owner();
        let b = generate_owner();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[0].len(), 32, "random part of {a}");
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(a.len() <= MAX_OWNER_BYTES);
    }

    #[test]
    fn url_and_key_value_strings_are_both_understood() {
        let url = pg_config("postgresql://alice@db.example:6543/app", no_env).unwrap();
        assert_eq!(url.get_user(), Some("alice"));
        assert_eq!(url.get_ports(), &[6543]);
        assert_eq!(url.get_dbname(), Some("app"));
        let kv = pg_config("host=127.0.0.1 port=5433 user=bob dbname=x", no_env).unwrap();
        assert_eq!(kv.get_user(), Some("bob"));
        assert_eq!(kv.get_ports(), &[5433]);
        assert!(matches!(pg_config("postgresql://[broken", no_env), Err(Error::Config(_))));
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn an_empty_url_takes_everything_from_the_pg_environment() {
        let env = env_of(&[
            ("PGHOST", "db1,/run/pg"),
            ("PGPORT", "6000"),
            ("PGUSER", "carol"),
            ("PGDATABASE", "jobs"),
            ("PGPASSWORD", "s3cret"),
            ("USER", "nobody"),
        ]);
        let config = pg_config("", env).unwrap();
        assert_eq!(config.get_hosts().len(), 2);
        assert_eq!(config.get_ports(), &[6000]);
        assert_eq!(config.get_user(), Some("carol"));
        assert_eq!(config.get_dbname(), Some("jobs"));
        assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(config.get_application_name(), Some("dlock"));
    }

    #[test]
    fn the_url_wins_over_the_environment_and_user_falls_back_to_user() {
        let config =
            pg_config("postgresql://db.example/app", env_of(&[("USER", "dave"), ("PGDATABASE", "x")]))
                .unwrap();
        assert_eq!(config.get_user(), Some("dave"));
        assert_eq!(config.get_dbname(), Some("app"));
        assert!(matches!(pg_config("", env_of(&[("PGPORT", "http")])), Err(Error::Config(_))));
        assert!(matches!(pg_config("host=x", no_env), Err(Error::Config(_))), "no user anywhere");
    }

    // Fuzzing the one parser of ours that sees untrusted text (connection strings and PG*
    // variables come from configuration): any input is parsed or refused, never a panic.
    proptest::proptest! {
        #[test]
        fn any_connection_string_and_environment_is_parsed_or_refused(
            url in proptest::string::string_regex("(?s).{0,120}").unwrap(),
            vars in proptest::collection::vec(
                (proptest::sample::select(vec!["PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD", "USER"]),
                 proptest::string::string_regex("(?s).{0,40}").unwrap()),
                0..6,
            ),
        ) {
            let env = |name: &str| vars.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
            match pg_config(&url, env) {
                Ok(config) => proptest::prop_assert!(config.get_user().is_some(), "a config always has a user"),
                Err(e) => proptest::prop_assert!(matches!(e, Error::Config(_)), "{e:?}"),
            }
        }

        #[test]
        fn urls_built_from_parts_give_those_parts_back(
            user in "[a-z][a-z0-9_]{0,15}",
            host in "[a-z][a-z0-9-]{0,20}(\\.[a-z]{2,5})?",
            port in 1u16..,
            db in "[a-z][a-z0-9_]{0,15}",
        ) {
            let config = pg_config(&format!("postgresql://{user}@{host}:{port}/{db}"), no_env).unwrap();
            proptest::prop_assert_eq!(config.get_user(), Some(user.as_str()));
            proptest::prop_assert_eq!(config.get_ports(), &[port]);
            proptest::prop_assert_eq!(config.get_dbname(), Some(db.as_str()));
        }

        #[test]
        fn truncation_is_a_prefix_on_a_character_boundary(s in "\\PC{0,80}", max in 0usize..100) {
            let t = truncate_to_char_boundary(&s, max);
            proptest::prop_assert!(s.starts_with(t));
            if s.len() <= max {
                proptest::prop_assert_eq!(t, s.as_str());
            } else {
                // At most `max` bytes, and as many as fit: a character is at most 4 bytes.
                proptest::prop_assert!(t.len() <= max && t.len() + 4 > max, "{} of {max}", t.len());
            }
        }
    }

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate_to_char_boundary("héllo", 2), "h");
        assert_eq!(truncate_to_char_boundary("abc", 10), "abc");
    }
}
