//! The client: a connection pool and the owner identity every lease of this client is taken as.

mod builder;
mod by_key;
mod owner;
mod wait_free;

use std::future::Future;
use std::sync::Arc;

use deadpool_postgres::Pool;

pub use builder::ClientBuilder;
pub use by_key::{Expiry, LiveLease};

use crate::connect::{PoolerMode, SslMode, TlsSettings};
use crate::error::Error;
use crate::lock::{Kind, Lease, LockAllBuilder, LockBuilder};
use crate::statements::Statements;
use crate::statements::call::Protocol;
use crate::statements::schema;
use crate::waiting::{DEFAULT_MAX_POLL_INTERVAL, Listener, Waits};

/// How many connections a client made by [`Client::connect`] opens at most: a pool of 15 and
/// the listener its waits share (opened by the first wait).
pub const DEFAULT_POOL_SIZE: usize = 16;

/// A dlock client: a pool of connections to one database and one owner identity.
///
/// Cloning is cheap and shares both: clones are the same owner, so a lock taken through one
/// clone is reentrant through another (same fence, one more hold).
#[derive(Clone)]
pub struct Client {
    pub(crate) pool: Pool,
    pub(crate) owner: Arc<str>,
    pub(crate) shared: Arc<Shared>,
}

/// What a client and its clones share, whatever their owner.
pub(crate) struct Shared {
    pub(crate) pooler: PoolerMode,
    /// The statements of the database, qualified with the extension's schema: found on first
    /// use (and looked for again after a failure, e.g. before the extension was installed).
    statements: tokio::sync::OnceCell<Arc<Statements>>,
    /// The local lines of waits, and what wakes them; `None` for a pool of unknown origin,
    /// whose waits wait on the server.
    pub(crate) waits: Option<Arc<Waits>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("owner", &self.owner)
            .field("pooler", &self.shared.pooler)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the database named by `url`: a libpq-style URL
    /// (`postgresql://user@host:5432/db`) or `key=value` string (`host=/run/postgresql user=app`).
    /// Parts it leaves out come from `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD`,
    /// `PGSSLMODE` and `PGSSLROOTCERT` as with libpq (user defaults to `$USER`); an empty `url`
    /// takes everything from them. TLS follows `sslmode` with libpq's meanings (default
    /// `prefer`; see [`ClientBuilder`]), and `dlock_pooler=transaction` says the client talks
    /// through a transaction pooler (see the crate docs).
    ///
    /// Opens one connection of the pool to check the address and credentials now rather than
    /// at the first lock: [`Error::Connection`] (or [`Error::Tls`]) if it cannot,
    /// [`Error::Config`] if `url` makes no sense. The client opens at most
    /// [`DEFAULT_POOL_SIZE`] connections, whatever the number of waiting acquires: they share
    /// one listener connection.
    pub async fn connect(url: &str) -> Result<Client, Error> {
        Client::builder(url).connect().await
    }

    /// Like [`connect`](Self::connect), but opens no connection until the first lock call.
    pub fn connect_lazy(url: &str) -> Result<Client, Error> {
        Client::builder(url).build()
    }

    /// A client of `url` with more choices than [`connect`](Self::connect): a transaction
    /// pooler in between, the pool's size.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// A client on a pool you built yourself (size, TLS, hooks are yours), with a fresh owner.
    /// Having no listener, its waits wait on the server, each holding a pooled connection for
    /// its length (as [`LockBuilder::server_queue`]): size the pool for them.
    pub fn from_pool(pool: Pool) -> Client {
        Client::new(pool, PoolerMode::Session, None)
    }

    /// Like [`from_pool`](Self::from_pool), for a pool whose connections go through a pooler
    /// of `pooler`'s mode: behind a transaction pooler ([`PoolerMode::Transaction`]) nothing is
    /// prepared, waits retry holding no server connection (pausing at most 250 ms), and
    /// session-bound leases are refused, as for a client from
    /// [`ClientBuilder::pooler`]. [`PoolerMode::Session`] is [`from_pool`](Self::from_pool).
    pub fn from_pool_with_pooler(pool: Pool, pooler: PoolerMode) -> Client {
        let waits = pooler.is_transaction().then(|| Waits::polling(DEFAULT_MAX_POLL_INTERVAL));
        Client::new(pool, pooler, waits)
    }

    /// Like [`from_pool`](Self::from_pool), with waits that hold no pooled connection: they
    /// share one listener connection opened from `listener` on the first wait, as a client
    /// from [`connect`](Self::connect) does. Count it in your connection budget. The listener
    /// uses TLS as `listener`'s `ssl_mode` says, without verifying the server's certificate
    /// (for verification, connect with [`Client::builder`] and `sslmode=verify-full`).
    pub fn from_pool_with_listener(pool: Pool, listener: tokio_postgres::Config) -> Client {
        use tokio_postgres::config::SslMode as Pg;
        let mode = match listener.get_ssl_mode() {
            Pg::Disable => SslMode::Disable,
            Pg::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        let tls = TlsSettings { mode, root_cert: None }.unverified_connector();
        Client::new(pool, PoolerMode::Session, Some(Waits::listening(Listener::new(listener, tls))))
    }

    pub(crate) fn new(pool: Pool, pooler: PoolerMode, waits: Option<Arc<Waits>>) -> Client {
        let shared = Shared { pooler, statements: tokio::sync::OnceCell::new(), waits };
        Client { pool, owner: Arc::from(owner::generate()), shared: Arc::new(shared) }
    }

    /// The same pool under another owner identity (e.g. a stable name for one worker). Owners
    /// must be unguessable to others: whoever knows an owner string (and has the role) can
    /// renew and release its leases. At most 256 bytes, not empty: every call checks it before
    /// sending anything.
    pub fn with_owner(&self, owner: impl Into<String>) -> Client {
        Client { pool: self.pool.clone(), owner: Arc::from(owner.into()), shared: self.shared.clone() }
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

    /// Whether this client talks to PostgreSQL directly (or through a session pooler) or
    /// through a transaction pooler.
    pub fn pooler(&self) -> PoolerMode {
        self.shared.pooler
    }

    /// The schema the extension lives in, in this client's database (looked up on first use,
    /// like every call): [`Error::NotInstalled`] if it is not installed there.
    pub async fn extension_schema(&self) -> Result<String, Error> {
        Ok(self.statements().await?.schema.clone())
    }

    /// Starts describing a lock on `key`; finish with [`LockBuilder::acquire`] or
    /// [`LockBuilder::try_acquire`]. Defaults: 30 s ttl renewed by a watchdog, no wait.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), key.into())
    }

    /// Starts describing a counting semaphore of `permits` on `key`: a shared lease granted
    /// only while fewer than `permits` owners hold the key (`dlock_acquire_shared` with
    /// `max_holders`). Everyone using the key must pass the same number (another number while
    /// holders hold it is [`Error::InvalidArgument`], as is 0, found before anything is sent).
    /// Each holder is an owner: tasks of one process that should count separately need a
    /// client each ([`with_owner`](Self::with_owner)), since clones are the same owner and
    /// share one permit.
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> LockBuilder {
        LockBuilder::of_kind(self.clone(), key.into(), Kind::Shared { max_holders: Some(permits) })
    }

    /// Starts describing a lock on every key of `keys` at once, all or none (see
    /// [`LockAllBuilder`]); the fences come in the order of `keys`.
    pub fn lock_all<I, K>(&self, keys: I) -> LockAllBuilder
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        LockAllBuilder::new(self.clone(), keys.into_iter().map(Into::into).collect())
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

    /// The statements of this client's database, its extension's schema found on first use.
    pub(crate) async fn statements(&self) -> Result<Arc<Statements>, Error> {
        let statements = self
            .shared
            .statements
            .get_or_try_init(|| async {
                let connection = self.pool.get().await?;
                // Unnamed whatever the pooler mode: it runs once, nothing to prepare.
                let row = connection.query_typed_one(schema::FIND, &[]).await?;
                Ok::<_, Error>(Arc::new(Statements::new(&schema::from_row(&row)?)))
            })
            .await?;
        Ok(statements.clone())
    }

    /// Whether `other` talks to the same server as this client (a clone, or another owner on
    /// the same pool).
    #[cfg(test)]
    pub(crate) fn same_server(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// How this client's statements reach the server.
    pub(crate) fn protocol(&self) -> Protocol {
        Protocol::from(self.shared.pooler)
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
