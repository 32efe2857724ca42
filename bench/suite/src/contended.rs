//! Workload 2: N clients on one key, each waiting for it, taking it and giving it back at once:
//! grants per second and how long each acquire took, for dlock (waiting on the server, durable
//! and fast mode, and through the Rust client on its one listener), blocking advisory locks,
//! Redis with Redisson-style pub/sub waiters (release = Lua `DEL` + `PUBLISH`; a waiter
//! subscribes, tries `SET NX`, and tries again on each message), and etcd (a waiter watches
//! the key's deletions and tries again on each).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_client::Client;
use futures::StreamExt;
use redis::aio::{MultiplexedConnection, PubSub};
use redis::{ConnectionAddr, IntoConnectionInfo, Script};
use tokio::sync::Mutex;
use tokio_postgres::Statement;

use crate::Result;
use crate::TTL;
use crate::contenders::{Contender, Servers, fast_mode_ready, pg_connect, redis_take};
use crate::etcd;
use crate::workloads::{Latency, Point, histogram};
use bench_common::redis_lock;

enum Waiter {
    Sql(tokio_postgres::Client, Statement, Statement, String),
    Client(Client),
    Redis(MultiplexedConnection, PubSub, Script, String),
    Etcd(Box<etcd::Session>),
}

/// The contenders of this workload.
pub const CONTENDERS: [Contender; 6] = [
    Contender::DlockSql,
    Contender::DlockClient,
    Contender::DlockFast,
    Contender::Advisory,
    Contender::Redis,
    Contender::Etcd,
];

async fn open(
    contender: Contender,
    servers: &Servers,
    key: &str,
    id: usize,
    shared: &Client,
) -> Result<Waiter> {
    let owner = format!("bench-contended:{}:{id}", std::process::id());
    Ok(match contender {
        Contender::DlockSql | Contender::DlockFast | Contender::Advisory => {
            let client = pg_connect(&servers.pg_url).await?;
            let (take, give) = match contender {
                Contender::DlockSql => (
                    "SELECT dlock_acquire($1, $2, '30 seconds'::interval, '60 seconds'::interval) IS NOT NULL",
                    "SELECT dlock_release($1, $2)",
                ),
                Contender::DlockFast => {
                    fast_mode_ready(servers).await?;
                    (
                        "SELECT dlock_fast_acquire($1, $2, '30 seconds'::interval, '60 seconds'::interval) IS NOT NULL",
                        "SELECT dlock_fast_release($1, $2)",
                    )
                }
                _ => (
                    "SELECT true FROM pg_advisory_lock(hashtextextended($1, 0))",
                    "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                ),
            };
            let take = client.prepare(take).await?;
            let give = client.prepare(give).await?;
            Waiter::Sql(client, take, give, owner)
        }
        Contender::DlockClient => Waiter::Client(shared.with_owner(owner)),
        Contender::Redis => {
            let info = ConnectionAddr::Tcp("127.0.0.1".into(), servers.redis_port).into_connection_info()?;
            let client = redis::Client::open(info)?;
            let commands = client.get_multiplexed_async_connection().await?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(format!("{key}:released")).await?;
            Waiter::Redis(commands, pubsub, Script::new(redis_lock::RELEASE_AND_PUBLISH), owner)
        }
        Contender::Etcd => {
            Waiter::Etcd(Box::new(etcd::Session::connect(servers.etcd_port.ok_or("no etcd")?, owner).await?))
        }
        other => return Err(format!("{other:?} does not wait").into()),
    })
}

impl Waiter {
    async fn cycle(&mut self, key: &str) -> Result<()> {
        match self {
            Waiter::Sql(client, take, give, owner) => {
                let params = |s: &Statement| -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
                    if s.params().len() == 1 { vec![&key] } else { vec![&key, &*owner] }
                };
                let ok: bool = client.query_one(take, &params(take)).await?.get(0);
                if !ok {
                    return Err("the wait ran out".into());
                }
                client.query_one(give, &params(give)).await?;
            }
            Waiter::Client(client) => {
                let guard =
                    client.lock(key).ttl(TTL).watchdog(false).wait(Duration::from_secs(60)).acquire().await?;
                guard.release().await?;
            }
            Waiter::Redis(commands, pubsub, release, owner) => {
                let channel = format!("{key}:released");
                while !redis_take(commands, key, owner).await? {
                    // A release may have come between the SET and now: a bounded wait.
                    let _ =
                        tokio::time::timeout(Duration::from_millis(100), pubsub.on_message().next()).await;
                }
                let _: i64 = release.key(key).key(&channel).arg(&**owner).invoke_async(commands).await?;
            }
            Waiter::Etcd(etcd) => {
                etcd.lock(key).await?;
                if !etcd.unlock(key).await? {
                    return Err(format!("{key}: lost before release").into());
                }
            }
        }
        Ok(())
    }
}

/// `clients` sessions cycling on one key for `seconds`.
pub async fn run(
    contender: Contender,
    servers: &Servers,
    clients: usize,
    seconds: f64,
    key: &str,
) -> Result<Point> {
    let shared = Client::connect(&servers.pg_url).await?;
    let mut waiters = Vec::new();
    for id in 0..clients {
        waiters.push(Mutex::new(open(contender, servers, key, id, &shared).await?));
    }
    let waiters = Arc::new(waiters);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for task in 0..clients {
        let (waiters, key) = (waiters.clone(), key.to_string());
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut waiter = waiters[task].lock().await;
            while Instant::now() < deadline {
                let t = Instant::now();
                waiter.cycle(&key).await?;
                h.saturating_record(t.elapsed().as_nanos() as u64);
            }
            Ok::<_, crate::Error>(h)
        }));
    }
    let mut all = histogram();
    for t in tasks {
        all.add(t.await??)?;
    }
    let rate = all.len() as f64 / start.elapsed().as_secs_f64();
    Ok(Point { contender: contender.label().into(), clients, per_second: rate, latency: Latency::of(&all) })
}
