//! One database session, with typed wrappers of the dlock SQL API.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Mutex;
use std::time::Instant;

use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, NoTls, Statement};

/// A connected session: a `tokio_postgres::Client` (it derefs to it) and its backend pid.
///
/// Dropping it closes the connection, which ends the backend (and its session-bound leases).
pub struct Session {
    client: Client,
    pid: i32,
    role: String,
    /// Statements prepared once per session, so a call is one round trip.
    statements: Mutex<HashMap<&'static str, Statement>>,
}

/// The outcome of an acquire run in a task of its own (`Session::spawn_acquire`).
pub struct Attempt {
    /// What `dlock_acquire` answered: a fence, NULL, or an error.
    pub result: Result<Option<i64>, Error>,
    /// When the answer arrived.
    pub finished_at: Instant,
    /// The session, handed back for further use.
    pub session: Session,
}

/// One row of the `dlock_locks` view; timestamps as seconds since the epoch (server clock),
/// `f64::INFINITY` for `'infinity'`.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRow {
    pub key: String,
    pub owner: Option<String>,
    pub fence: i64,
    pub hold_count: i32,
    pub acquired_at: f64,
    pub expires_at: Option<f64>,
    pub holder_pid: Option<i32>,
    pub holder_role: Option<String>,
    pub waiters: i32,
}

const ACQUIRE: &str = "SELECT dlock_acquire($1, $2, $3::text::interval, $4::text::interval)";
const ACQUIRE_DEFAULT_WAIT: &str = "SELECT dlock_acquire($1, $2, $3::text::interval)";
const RENEW: &str = "SELECT extract(epoch FROM dlock_renew($1, $2, $3::text::interval))::float8";
const RELEASE: &str = "SELECT dlock_release($1, $2)";
const RELEASE_ALL: &str = "SELECT dlock_release_all($1)";
const HOLDS: &str = "SELECT dlock_holds($1, $2)";
const FORCE_RELEASE: &str = "SELECT dlock_force_release($1)";
const LEASE_ROW: &str = "SELECT key, owner, fence, hold_count, \
       extract(epoch FROM acquired_at)::float8, extract(epoch FROM expires_at)::float8, \
       holder_pid, holder_role::text, waiters \
     FROM dlock_locks WHERE key OPERATOR(pg_catalog.=) $1";
/// Sessions holding the watch lock (advisory, field4 0x6b04) of a key hash.
/// Sessions holding a key's watch lock, found by the hash its channel carries: in the native
/// edition's lock space (objsubid 27396), or as the SQL edition's bigint advisory lock (1).
const WATCHERS: &str = "SELECT count(*) FROM pg_catalog.pg_locks \
     WHERE locktype = 'advisory' AND objsubid IN (1, 27396) AND granted AND pid <> pg_catalog.pg_backend_pid() \
       AND ((classid::int8 << 32) | objid::int8) = $1";
const SERVER_NOW: &str = "SELECT extract(epoch FROM pg_catalog.clock_timestamp())::float8";

impl Session {
    /// Connects over TCP as `role` to database `postgres`.
    pub async fn connect(host: &str, port: u16, role: &str) -> Result<Session, Error> {
        Session::connect_db(host, port, role, "postgres").await
    }

    /// Connects over TCP as `role` to database `dbname`.
    pub async fn connect_db(host: &str, port: u16, role: &str, dbname: &str) -> Result<Session, Error> {
        let mut config = tokio_postgres::Config::new();
        config.host(host).port(port).user(role).dbname(dbname).application_name("dlock-tests");
        // A session's own settings (the hostile-schema net's search_path, `make test-hostile`),
        // as libpq takes them.
        if let Ok(options) = std::env::var("PGOPTIONS")
            && !options.is_empty()
        {
            config.options(&options);
        }
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let pid = client.query_one("SELECT pg_catalog.pg_backend_pid()", &[]).await?.get(0);
        Ok(Session { client, pid, role: role.to_string(), statements: Mutex::new(HashMap::new()) })
    }

    /// The backend pid of this session (`pg_backend_pid()`).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The role this session logged in as.
    pub fn login_role(&self) -> &str {
        &self.role
    }

    /// The underlying client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn statement(&self, sql: &'static str) -> Result<Statement, Error> {
        if let Some(statement) = self.statements.lock().unwrap().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.statements.lock().unwrap().insert(sql, statement.clone());
        Ok(statement)
    }

    async fn one<T>(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<T, Error>
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        let statement = self.statement(sql).await?;
        let row = self.client.query_one(&statement, params).await?;
        row.try_get(0)
    }

    /// `dlock_acquire(key, owner, ttl, wait)`; `None` intervals are SQL NULL
    /// (`ttl NULL` = session-bound lease, `wait NULL` = wait without limit).
    pub async fn acquire(
        &self,
        key: &str,
        owner: &str,
        ttl: Option<&str>,
        wait: Option<&str>,
    ) -> Result<Option<i64>, Error> {
        self.one(ACQUIRE, &[&key, &owner, &ttl, &wait]).await
    }

    /// Runs `dlock_acquire(key, owner, ttl, wait)` in a task of its own (a waiter), handing
    /// the session back with the outcome.
    pub fn spawn_acquire(
        self,
        key: &str,
        owner: &str,
        ttl: Option<&str>,
        wait: Option<&str>,
    ) -> JoinHandle<Attempt> {
        let (key, owner) = (key.to_string(), owner.to_string());
        let (ttl, wait) = (ttl.map(str::to_string), wait.map(str::to_string));
        tokio::spawn(async move {
            let result = self.acquire(&key, &owner, ttl.as_deref(), wait.as_deref()).await;
            Attempt { result, finished_at: Instant::now(), session: self }
        })
    }

    /// `dlock_acquire(key, owner, ttl)`: the three-argument form (default `wait`).
    pub async fn acquire_default_wait(
        &self,
        key: &str,
        owner: &str,
        ttl: Option<&str>,
    ) -> Result<Option<i64>, Error> {
        self.one(ACQUIRE_DEFAULT_WAIT, &[&key, &owner, &ttl]).await
    }

    /// `dlock_acquire(key, owner, ttl, '0')`: a try that never waits.
    pub async fn try_acquire(&self, key: &str, owner: &str, ttl: &str) -> Result<Option<i64>, Error> {
        self.acquire(key, owner, Some(ttl), Some("0")).await
    }

    /// `dlock_renew(key, owner, ttl)`: the new `expires_at` (epoch seconds) or `None` (NULL).
    pub async fn renew(&self, key: &str, owner: &str, ttl: Option<&str>) -> Result<Option<f64>, Error> {
        self.one(RENEW, &[&key, &owner, &ttl]).await
    }

    /// `dlock_release(key, owner)`; a NULL answer is a contract violation and panics.
    pub async fn release(&self, key: &str, owner: &str) -> Result<bool, Error> {
        let released: Option<bool> = self.one(RELEASE, &[&key, &owner]).await?;
        Ok(released.unwrap_or_else(|| panic!("dlock_release({key:?}, {owner:?}) returned NULL")))
    }

    /// `dlock_release_all(owner)`: how many keys were freed.
    pub async fn release_all(&self, owner: &str) -> Result<i32, Error> {
        let freed: Option<i32> = self.one(RELEASE_ALL, &[&owner]).await?;
        Ok(freed.unwrap_or_else(|| panic!("dlock_release_all({owner:?}) returned NULL")))
    }

    /// `dlock_holds(key, fence)`.
    pub async fn holds(&self, key: &str, fence: i64) -> Result<bool, Error> {
        let holds: Option<bool> = self.one(HOLDS, &[&key, &fence]).await?;
        Ok(holds.unwrap_or_else(|| panic!("dlock_holds({key:?}, {fence}) returned NULL")))
    }

    /// `dlock_force_release(key)`.
    pub async fn force_release(&self, key: &str) -> Result<bool, Error> {
        let freed: Option<bool> = self.one(FORCE_RELEASE, &[&key]).await?;
        Ok(freed.unwrap_or_else(|| panic!("dlock_force_release({key:?}) returned NULL")))
    }

    /// The `dlock_locks` row of `key`, as this session sees it (`None`: no live lease).
    pub async fn lease(&self, key: &str) -> Result<Option<LeaseRow>, Error> {
        let statement = self.statement(LEASE_ROW).await?;
        let rows = self.client.query(&statement, &[&key]).await?;
        assert!(rows.len() <= 1, "dlock_locks shows {} rows for key {key:?}", rows.len());
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(LeaseRow {
            key: row.try_get(0)?,
            owner: row.try_get(1)?,
            fence: row.try_get(2)?,
            hold_count: row.try_get(3)?,
            acquired_at: row.try_get(4)?,
            expires_at: row.try_get(5)?,
            holder_pid: row.try_get(6)?,
            holder_role: row.try_get(7)?,
            waiters: row.try_get(8)?,
        }))
    }

    /// How many sessions `dlock_locks` says wait on `key` (0 when the key has no live lease);
    /// every holder's row shows the same count.
    pub async fn waiters(&self, key: &str) -> Result<i32, Error> {
        // Operators qualified: tests run this with shadow objects on the search_path too.
        self.one(
            "SELECT COALESCE(pg_catalog.max(waiters), 0) FROM dlock_locks WHERE key OPERATOR(pg_catalog.=) $1",
            &[&key],
        )
        .await
    }

    /// How many other sessions watch `key` (hold its watch lock). Learns the key's hash by
    /// watching it briefly itself.
    pub async fn watchers(&self, key: &str) -> Result<i64, Error> {
        let channel: String = self.one("SELECT dlock_watch($1)", &[&key]).await?;
        let _: bool = self.one("SELECT dlock_unwatch($1)", &[&key]).await?;
        let hex = channel.strip_prefix("dlock_").expect("a dlock_<hash> channel");
        let hash = u64::from_str_radix(hex, 16).expect("a hex key hash") as i64;
        self.one(WATCHERS, &[&hash]).await
    }

    /// The server's clock (`clock_timestamp()`), in epoch seconds.
    pub async fn server_now(&self) -> Result<f64, Error> {
        self.one(SERVER_NOW, &[]).await
    }
}

impl Deref for Session {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}
