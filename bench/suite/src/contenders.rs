//! The contenders, each as a session that can take and give back a lock and renew a lease:
//! dlock through SQL (durable, and fast mode: leases in shared memory, no WAL) and through the
//! Rust client, raw advisory locks, the hand-written lock table (durable and with
//! `synchronous_commit = off`), Redis (`SET NX PX` + owner-checked Lua `DEL`, the Redisson/seed
//! recipe), and etcd (a lease per session + put-if-absent, see etcd.rs).

use std::time::Duration;

use dlock_client::Client;
use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::{ConnectionAddr, IntoConnectionInfo, Script};
use serde::Serialize;
use tokio_postgres::{NoTls, Statement};

use crate::etcd;
use crate::{Result, TTL};
use bench_common::redis_lock;

/// The lease ttl every contender uses.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Contender {
    DlockSql,
    DlockClient,
    DlockFast,
    Advisory,
    Naive,
    NaiveAsync,
    Redis,
    Etcd,
}

pub const ALL: [Contender; 8] = [
    Contender::DlockSql,
    Contender::DlockClient,
    Contender::DlockFast,
    Contender::Advisory,
    Contender::Naive,
    Contender::NaiveAsync,
    Contender::Redis,
    Contender::Etcd,
];

impl Contender {
    pub fn label(self) -> &'static str {
        match self {
            Contender::DlockSql => "dlock (SQL, durable)",
            Contender::DlockClient => "dlock (Rust client)",
            Contender::DlockFast => "dlock (fast mode)",
            Contender::Advisory => "pg_advisory_lock",
            Contender::Naive => "lock table (durable)",
            Contender::NaiveAsync => "lock table (synchronous_commit off)",
            Contender::Redis => "Redis SET NX PX + Lua DEL",
            Contender::Etcd => "etcd lease lock",
        }
    }
}

/// Where the servers are.
#[derive(Clone)]
pub struct Servers {
    pub pg_url: String,
    pub redis_port: u16,
    /// etcd's client port on 127.0.0.1, when one runs.
    pub etcd_port: Option<u16>,
}

impl Servers {
    /// Whether `contender` has a server to run against.
    pub fn has(&self, contender: Contender) -> bool {
        contender != Contender::Etcd || self.etcd_port.is_some()
    }
}

const DLOCK_ACQUIRE: &str = "SELECT dlock_acquire($1, $2, '30 seconds'::interval)";
const DLOCK_RELEASE: &str = "SELECT dlock_release($1, $2)";
const DLOCK_RENEW: &str = "SELECT dlock_renew($1, $2, '30 seconds'::interval)";
const FAST_ACQUIRE: &str = "SELECT dlock_fast_acquire($1, $2, '30 seconds'::interval)";
const FAST_RELEASE: &str = "SELECT dlock_fast_release($1, $2)";
const FAST_RENEW: &str = "SELECT dlock_fast_renew($1, $2, '30 seconds'::interval)";
const ADVISORY_LOCK: &str = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
const ADVISORY_UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";
const NAIVE_ACQUIRE: &str = "SELECT naive_acquire($1, $2, '30 seconds'::interval)";
const NAIVE_RELEASE: &str = "SELECT naive_release($1, $2)";
const NAIVE_RENEW: &str =
    "UPDATE naive_lock SET expires_at = now() + '30 seconds'::interval WHERE key = $1 AND owner = $2";

/// Prepared statements of one SQL contender on one connection.
pub struct Sql {
    client: tokio_postgres::Client,
    take: Statement,
    give: Statement,
    renew: Option<Statement>,
}

/// One session of a contender (one per concurrent task).
pub enum Session {
    Sql(Sql, String),
    Client(Client),
    Redis(MultiplexedConnection, String, Script, Script),
    Etcd(Box<etcd::Session>),
}

pub async fn pg_connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Waits out fast mode's lock-delay after the server's start (no fast key is granted for
/// `dlock.fast_max_ttl`): polls a probe key until it is granted. Once per run.
pub async fn fast_mode_ready(servers: &Servers) -> Result<()> {
    static READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            let client = pg_connect(&servers.pg_url).await?;
            let probe = ("bench:fast-probe", format!("bench-probe:{}", std::process::id()));
            let start = std::time::Instant::now();
            loop {
                let fence: Option<i64> = client
                    .query_one(
                        "SELECT dlock_fast_acquire($1, $2, '1 second'::interval)",
                        &[&probe.0, &probe.1],
                    )
                    .await?
                    .get(0);
                if fence.is_some() {
                    client.execute("SELECT dlock_fast_release($1, $2)", &[&probe.0, &probe.1]).await?;
                    eprintln!(
                        "bench: fast mode's lock-delay over after {:.1} s",
                        start.elapsed().as_secs_f64()
                    );
                    return Ok::<_, crate::Error>(());
                }
                if start.elapsed() > Duration::from_secs(40) {
                    return Err("fast mode grants nothing 40 s on: is dlock.fast_max_ttl above 30 s?".into());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await?;
    Ok(())
}

impl Session {
    pub async fn open(
        contender: Contender,
        servers: &Servers,
        id: usize,
        pool: Option<&Client>,
    ) -> Result<Session> {
        let owner = format!("bench:{}:{id}", std::process::id());
        let sql = |take: &'static str, give: &'static str, renew: Option<&'static str>| async move {
            let client = pg_connect(&servers.pg_url).await?;
            if contender == Contender::NaiveAsync {
                client.batch_execute("SET synchronous_commit = off").await?;
            }
            let take = client.prepare(take).await?;
            let give = client.prepare(give).await?;
            let renew = match renew {
                Some(r) => Some(client.prepare(r).await?),
                None => None,
            };
            Ok::<_, crate::Error>(Sql { client, take, give, renew })
        };
        Ok(match contender {
            Contender::DlockSql => {
                Session::Sql(sql(DLOCK_ACQUIRE, DLOCK_RELEASE, Some(DLOCK_RENEW)).await?, owner)
            }
            Contender::DlockFast => {
                fast_mode_ready(servers).await?;
                Session::Sql(sql(FAST_ACQUIRE, FAST_RELEASE, Some(FAST_RENEW)).await?, owner)
            }
            Contender::Advisory => Session::Sql(sql(ADVISORY_LOCK, ADVISORY_UNLOCK, None).await?, owner),
            Contender::Naive | Contender::NaiveAsync => {
                Session::Sql(sql(NAIVE_ACQUIRE, NAIVE_RELEASE, Some(NAIVE_RENEW)).await?, owner)
            }
            Contender::DlockClient => {
                let client = pool.ok_or("the client contender shares one client")?.with_owner(owner);
                Session::Client(client)
            }
            Contender::Etcd => {
                let port = servers.etcd_port.ok_or("no etcd")?;
                Session::Etcd(Box::new(etcd::Session::connect(port, owner).await?))
            }
            Contender::Redis => {
                let info = ConnectionAddr::Tcp("127.0.0.1".into(), servers.redis_port)
                    .into_connection_info()?
                    .set_tcp_settings(TcpSettings::default().set_nodelay(true));
                let connection = redis::Client::open(info)?.get_multiplexed_async_connection().await?;
                Session::Redis(
                    connection,
                    owner,
                    Script::new(redis_lock::RELEASE),
                    Script::new(redis_lock::RENEW),
                )
            }
        })
    }

    /// Takes `key` (free by construction) and gives it back.
    pub async fn pair(&mut self, key: &str) -> Result<()> {
        match self {
            Session::Sql(s, owner) => {
                let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    if s.take.params().len() == 1 { vec![&key] } else { vec![&key, owner] };
                let row = s.client.query_one(&s.take, &params).await?;
                if !granted(&row) {
                    return Err(format!("{key}: not granted").into());
                }
                let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    if s.give.params().len() == 1 { vec![&key] } else { vec![&key, owner] };
                s.client.query_one(&s.give, &params).await?;
            }
            Session::Client(client) => {
                let guard = client.lock(key).ttl(TTL).try_acquire().await?.ok_or("not granted")?;
                guard.release().await?;
            }
            Session::Redis(connection, owner, release, _) => {
                if !redis_take(connection, key, owner).await? {
                    return Err(format!("{key}: not granted").into());
                }
                let _: i64 = release.key(key).arg(&**owner).invoke_async(connection).await?;
            }
            Session::Etcd(etcd) => {
                if !etcd.try_lock(key).await? {
                    return Err(format!("{key}: not granted").into());
                }
                etcd.unlock(key).await?;
            }
        }
        Ok(())
    }

    /// Takes `key` and keeps it (for the renew and scale workloads).
    pub async fn take(&mut self, key: &str) -> Result<()> {
        match self {
            Session::Sql(s, owner) => {
                let row = s.client.query_one(&s.take, &[&key, owner]).await?;
                if !granted(&row) {
                    return Err(format!("{key}: not granted").into());
                }
            }
            Session::Etcd(etcd) => etcd.take(key).await?,
            Session::Redis(connection, owner, ..) => {
                let _: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&**owner)
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(connection)
                    .await?;
            }
            Session::Client(_) => return Err("the client keeps leases in guards".into()),
        }
        Ok(())
    }

    /// Gives back `key` taken by `take`.
    pub async fn give(&mut self, key: &str) -> Result<()> {
        match self {
            Session::Sql(s, owner) => {
                s.client.query_one(&s.give, &[&key, owner]).await?;
            }
            Session::Etcd(etcd) => etcd.give(key).await?,
            Session::Redis(connection, owner, release, _) => {
                let _: i64 = release.key(key).arg(&**owner).invoke_async(connection).await?;
            }
            Session::Client(_) => return Err("the client keeps leases in guards".into()),
        }
        Ok(())
    }

    /// Renews the lease on `key` this session took.
    pub async fn renew(&mut self, key: &str) -> Result<()> {
        match self {
            Session::Sql(s, owner) => {
                let renew = s.renew.as_ref().ok_or("no renew")?;
                s.client.execute(renew, &[&key, owner]).await?;
            }
            Session::Etcd(etcd) => etcd.renew(key).await?,
            Session::Redis(connection, owner, _, renew) => {
                let _: i64 =
                    renew.key(key).arg(&**owner).arg(TTL.as_millis() as u64).invoke_async(connection).await?;
            }
            Session::Client(_) => return Err("the client renews through its watchdog".into()),
        }
        Ok(())
    }
}

/// `SET key owner NX PX ttl`: whether the key was free and is now `owner`'s.
pub async fn redis_take(connection: &mut MultiplexedConnection, key: &str, owner: &str) -> Result<bool> {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(owner)
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(connection)
        .await?;
    Ok(set.is_some())
}

fn granted(row: &tokio_postgres::Row) -> bool {
    row.try_get::<_, Option<i64>>(0).ok().flatten().is_some()
        || row.try_get::<_, Option<bool>>(0).ok().flatten() == Some(true)
}
