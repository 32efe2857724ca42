//! PostgreSQL sessions of the benchmark: one connection each (TCP on loopback, like the Redis
//! peer), every statement prepared once so that a call is one round trip, and an observer that
//! reads from `pg_stat_activity` where the waiting backends sleep.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use tokio_postgres::{Client, NoTls, Statement};

use crate::Result;

/// The statements a session runs; prepared at connect time.
struct Statements {
    dlock_take: Statement,
    dlock_wait: Statement,
    dlock_wait_long: Statement,
    dlock_release: Statement,
    advisory_lock: Statement,
    advisory_unlock: Statement,
}

/// One backend: a client, its pid and the owner string of its dlock leases.
pub struct PgSession {
    client: Client,
    pid: i32,
    owner: String,
    statements: Statements,
}

/// Where a PostgreSQL cluster listens.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// How long a waiter in the hand-off measurements may wait (far above any hand-off).
pub const HANDOFF_WAIT: &str = "10 seconds";

impl PgSession {
    /// Connects to `endpoint` as `postgres` and prepares the statements. With `async_commit`
    /// the session runs with `synchronous_commit = off` (its grants skip the WAL flush).
    pub async fn connect(endpoint: &Endpoint, async_commit: bool) -> Result<PgSession> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&endpoint.host)
            .port(endpoint.port)
            .user("postgres")
            .dbname("postgres")
            .application_name("bench-wait");
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        if async_commit {
            client.batch_execute("SET synchronous_commit = off").await?;
        }
        let statements = Statements {
            dlock_take: client.prepare("SELECT dlock_acquire($1, $2, '30 seconds')").await?,
            dlock_wait: client
                .prepare(&format!("SELECT dlock_acquire($1, $2, '30 seconds', '{HANDOFF_WAIT}')"))
                .await?,
            dlock_wait_long: client
                .prepare("SELECT dlock_acquire($1, $2, '10 minutes', $3::text::interval)")
                .await?,
            dlock_release: client.prepare("SELECT dlock_release($1, $2)").await?,
            advisory_lock: client.prepare("SELECT pg_advisory_lock($1)").await?,
            advisory_unlock: client.prepare("SELECT pg_advisory_unlock($1)").await?,
        };
        let owner = format!("bench-wait:{pid}");
        Ok(PgSession { client, pid, owner, statements })
    }

    /// `n` sessions, connected a few at a time.
    pub async fn connect_many(endpoint: &Endpoint, n: usize) -> Result<Vec<PgSession>> {
        futures::stream::iter(0..n)
            .map(|_| PgSession::connect(endpoint, false))
            .buffered(16)
            .try_collect()
            .await
    }

    /// The backend's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The underlying client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The owner string of this session's leases.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// `dlock_acquire(key, owner, '30 seconds')` on a key that must be free.
    pub async fn dlock_take(&self, key: &str) -> Result<()> {
        let fence: Option<i64> =
            self.client.query_one(&self.statements.dlock_take, &[&key, &self.owner]).await?.get(0);
        fence.map(drop).ok_or_else(|| format!("dlock_acquire({key:?}) found the key busy").into())
    }

    /// `dlock_acquire(key, owner, '30 seconds', HANDOFF_WAIT)`: waits; the fence once granted.
    pub async fn dlock_wait(&self, key: &str) -> Result<i64> {
        let fence: Option<i64> =
            self.client.query_one(&self.statements.dlock_wait, &[&key, &self.owner]).await?.get(0);
        fence.ok_or_else(|| format!("dlock_acquire({key:?}) waited {HANDOFF_WAIT} in vain").into())
    }

    /// `dlock_acquire(key, owner, '10 minutes', wait)`: a long wait, ended by a grant or a cancel.
    pub async fn dlock_wait_long(&self, key: &str, wait: &str) -> Result<Option<i64>> {
        let row =
            self.client.query_one(&self.statements.dlock_wait_long, &[&key, &self.owner, &wait]).await?;
        Ok(row.get(0))
    }

    /// `dlock_release(key, owner)`, which must find the lease ours.
    pub async fn dlock_release(&self, key: &str) -> Result<()> {
        let released: bool =
            self.client.query_one(&self.statements.dlock_release, &[&key, &self.owner]).await?.get(0);
        if released { Ok(()) } else { Err(format!("dlock_release({key:?}) found no lease of ours").into()) }
    }

    /// `pg_advisory_lock(key)`: takes or waits for a session-level advisory lock.
    pub async fn advisory_lock(&self, key: i64) -> Result<()> {
        self.client.execute(&self.statements.advisory_lock, &[&key]).await?;
        Ok(())
    }

    /// `pg_advisory_unlock(key)`, which must find the lock held by this session.
    pub async fn advisory_unlock(&self, key: i64) -> Result<()> {
        let released: bool = self.client.query_one(&self.statements.advisory_unlock, &[&key]).await?.get(0);
        if released { Ok(()) } else { Err(format!("pg_advisory_unlock({key}) held nothing").into()) }
    }
}

/// Where a set of backends sleeps: on their latch (`wait_event_type = 'Extension'`, dlock's
/// head of a queue) or in the lock manager (`'Lock'`: advisory waiters, dlock's queue behind
/// its head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parked {
    pub on_latch: i32,
    pub in_lock_manager: i32,
}

/// A session that watches the others, never taking part in a measurement itself.
pub struct Observer {
    session: PgSession,
    parked: Statement,
}

impl Observer {
    /// Connects an observer to `endpoint`.
    pub async fn connect(endpoint: &Endpoint) -> Result<Observer> {
        let session = PgSession::connect(endpoint, false).await?;
        let parked = session
            .client
            .prepare(
                "SELECT (count(*) FILTER (WHERE wait_event_type = 'Extension'))::int4, \
                        (count(*) FILTER (WHERE wait_event_type = 'Lock'))::int4 \
                   FROM pg_stat_activity WHERE pid = ANY($1)",
            )
            .await?;
        Ok(Observer { session, parked })
    }

    /// The observer's own session.
    pub fn session(&self) -> &PgSession {
        &self.session
    }

    /// Where the backends of `pids` sleep right now.
    pub async fn parked(&self, pids: &[i32]) -> Result<Parked> {
        let row = self.session.client.query_one(&self.parked, &[&pids]).await?;
        Ok(Parked { on_latch: row.get(0), in_lock_manager: row.get(1) })
    }

    /// Polls until the backends of `pids` sleep as `expected`; fails after `limit`.
    pub async fn until_parked(&self, pids: &[i32], expected: Parked, limit: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            let now = self.parked(pids).await?;
            if now == expected {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(format!("waiters never parked as {expected:?}; last seen {now:?}").into());
            }
        }
    }

    /// Cancels the running statement of each backend of `pids` (`pg_cancel_backend`).
    pub async fn cancel(&self, pids: &[i32]) -> Result<()> {
        self.session
            .client
            .execute("SELECT pg_cancel_backend(pid) FROM unnest($1::int4[]) AS pid", &[&pids])
            .await?;
        Ok(())
    }

    /// The pid of the cluster's postmaster: the parent of the observer's backend.
    pub fn postmaster_pid(&self) -> Result<i32> {
        crate::proc_stat::parent_pid(self.session.pid)
    }
}
