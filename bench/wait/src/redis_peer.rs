//! The Redis peer, Redisson-style: a lease is `SET key owner NX PX 30000`; a release is a Lua
//! script that deletes the key only if the owner matches and then `PUBLISH`es on the key's
//! channel; a waiter subscribes to that channel first, then tries `SET NX`, and tries again on
//! every message (no polling), unsubscribing once granted. Every waiter gets every message, so
//! with a line of waiters each release sets off a race for the key (no arrival order).
//!
//! Each session has two connections, as a Redisson client does: one for commands, one for
//! pub/sub; both set `TCP_NODELAY` (as tokio-postgres does), which redis-rs leaves off.

use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::aio::{MultiplexedConnection, PubSub};
use redis::io::tcp::TcpSettings;
use redis::{ConnectionAddr, IntoConnectionInfo, Script};
use tokio::sync::{Mutex, oneshot};

use crate::Result;

/// The owner-checked release: delete and announce, or do nothing.
/// The lease ttl of the peer (the same 30 s as the dlock hand-offs).
const TTL_MS: u64 = 30_000;

/// How long a waiter waits before giving up (as dlock's `HANDOFF_WAIT`).
const WAIT: Duration = Duration::from_secs(10);

/// One Redis client: a command connection and a pub/sub connection.
pub struct RedisSession {
    commands: MultiplexedConnection,
    pubsub: Mutex<PubSub>,
    owner: String,
    release: Script,
}

/// The channel on which releases of `key` are announced.
fn channel(key: &str) -> String {
    format!("{key}:released")
}

impl RedisSession {
    /// Connects to the Redis server at `host:port`; `id` makes the owner string unique.
    pub async fn connect(host: &str, port: u16, id: usize) -> Result<RedisSession> {
        let info = ConnectionAddr::Tcp(host.to_string(), port)
            .into_connection_info()?
            .set_tcp_settings(TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info)?;
        let commands = client.get_multiplexed_async_connection().await?;
        let pubsub = Mutex::new(client.get_async_pubsub().await?);
        let owner = format!("bench-wait:{}:{id}", std::process::id());
        Ok(RedisSession {
            commands,
            pubsub,
            owner,
            release: Script::new(bench_common::redis_lock::RELEASE_AND_PUBLISH),
        })
    }

    /// `INFO server`'s `redis_version`.
    pub async fn server_version(&self) -> Result<String> {
        let info: String = redis::cmd("INFO").arg("server").query_async(&mut self.commands.clone()).await?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string())
    }

    /// `SET key owner NX PX ttl`: whether the key was ours to take.
    async fn try_take(&self, key: &str) -> Result<bool> {
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&self.owner)
            .arg("NX")
            .arg("PX")
            .arg(TTL_MS)
            .query_async(&mut self.commands.clone())
            .await?;
        Ok(reply.is_some())
    }

    /// Takes a key that must be free.
    pub async fn take(&self, key: &str) -> Result<()> {
        if self.try_take(key).await? { Ok(()) } else { Err(format!("redis key {key:?} is busy").into()) }
    }

    /// Waits for `key` and takes it; returns the moment the granting `SET` returned (before
    /// the unsubscribe). `parked` is told once the waiter has subscribed and found the key busy.
    pub async fn wait(&self, key: &str, parked: Option<oneshot::Sender<()>>) -> Result<Instant> {
        let mut pubsub = self.pubsub.lock().await;
        let channel = channel(key);
        pubsub.subscribe(&channel).await?;
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut parked = parked;
        let granted = loop {
            if self.try_take(key).await? {
                break Instant::now();
            }
            if let Some(parked) = parked.take() {
                let _ = parked.send(());
            }
            match tokio::time::timeout_at(deadline, pubsub.on_message().next()).await {
                Ok(Some(_released)) => {}
                Ok(None) => return Err("redis pub/sub connection closed".into()),
                Err(_) => return Err(format!("redis key {key:?}: waited {WAIT:?} in vain").into()),
            }
        };
        pubsub.unsubscribe(&channel).await?;
        Ok(granted)
    }

    /// The owner-checked release, which must find the key ours.
    pub async fn release(&self, key: &str) -> Result<()> {
        let released: i64 = self
            .release
            .key(key)
            .key(channel(key))
            .arg(&self.owner)
            .invoke_async(&mut self.commands.clone())
            .await?;
        if released == 1 { Ok(()) } else { Err(format!("redis key {key:?} was not ours").into()) }
    }
}
