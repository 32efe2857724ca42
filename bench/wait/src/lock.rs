//! The locks under test behind one interface: take a free key, wait for a busy one (returning
//! the moment the grant came back), release; and how to tell that a waiter has parked.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::Result;
use crate::pg::{Observer, Parked, PgSession};
use crate::redis_peer::RedisSession;

/// A lock key: text for dlock and Redis, a number for advisory locks.
#[derive(Clone, Debug)]
pub struct Key {
    pub text: String,
    pub id: i64,
}

impl Key {
    /// The key `bench-wait:<name>` (advisory lock `id`).
    pub fn new(name: &str, id: i64) -> Key {
        Key { text: format!("bench-wait:{name}"), id }
    }
}

/// One client of one kind of lock.
pub enum Locker {
    /// `dlock_acquire` / `dlock_release`.
    Dlock(Arc<PgSession>),
    /// `pg_advisory_lock` / `pg_advisory_unlock` (session level).
    Advisory(Arc<PgSession>),
    /// `SET NX PX` / Lua owner-checked `DEL` + `PUBLISH`, pub/sub waiters.
    Redis(RedisSession),
}

/// How long a waiter may take to park, or a grant to arrive, before the run fails.
pub const LIMIT: Duration = Duration::from_secs(15);

impl Locker {
    /// Takes `key`, which must be free.
    pub async fn take(&self, key: &Key) -> Result<()> {
        match self {
            Locker::Dlock(s) => s.dlock_take(&key.text).await,
            Locker::Advisory(s) => s.advisory_lock(key.id).await,
            Locker::Redis(r) => r.take(&key.text).await,
        }
    }

    /// Waits for `key` and takes it; the moment the granting call returned. Redis waiters tell
    /// `parked` when they sleep; PostgreSQL waiters are seen parked by an `Observer`.
    pub async fn wait(&self, key: &Key, parked: Option<oneshot::Sender<()>>) -> Result<Instant> {
        match self {
            Locker::Dlock(s) => s.dlock_wait(&key.text).await.map(|_fence| Instant::now()),
            Locker::Advisory(s) => s.advisory_lock(key.id).await.map(|()| Instant::now()),
            Locker::Redis(r) => r.wait(&key.text, parked).await,
        }
    }

    /// Releases `key`, which must be held by this client.
    pub async fn release(&self, key: &Key) -> Result<()> {
        match self {
            Locker::Dlock(s) => s.dlock_release(&key.text).await,
            Locker::Advisory(s) => s.advisory_unlock(key.id).await,
            Locker::Redis(r) => r.release(&key.text).await,
        }
    }

    /// The backend pid of a PostgreSQL client.
    pub fn pid(&self) -> Option<i32> {
        match self {
            Locker::Dlock(s) | Locker::Advisory(s) => Some(s.pid()),
            Locker::Redis(_) => None,
        }
    }

    /// Where `waiters` backends of this kind sleep once all of them wait, on `keys` distinct
    /// keys (one waiter per key, or all on one): a dlock key's first waiter is the head of its
    /// queue and sleeps on its latch, the others queue in the lock manager; every advisory
    /// waiter queues in the lock manager.
    pub fn parked_as(&self, waiters: usize, keys: usize) -> Parked {
        let (on_latch, in_lock_manager) = match self {
            Locker::Dlock(_) => (keys.min(waiters), waiters - keys.min(waiters)),
            Locker::Advisory(_) | Locker::Redis(_) => (0, waiters),
        };
        Parked { on_latch: on_latch as i32, in_lock_manager: in_lock_manager as i32 }
    }
}

/// Returns once the newest of `waiters` (all waiting on one key) has parked: told by its own
/// signal (Redis) or seen by the observer together with the ones before it (PostgreSQL).
pub async fn until_parked(
    waiters: &[Arc<Locker>],
    signal: oneshot::Receiver<()>,
    observer: Option<&Observer>,
) -> Result<()> {
    let newest = waiters.last().ok_or("no waiter")?;
    match (newest.as_ref(), observer) {
        (Locker::Redis(_), _) => {
            tokio::time::timeout(LIMIT, signal).await.map_err(|_| "a Redis waiter never parked")??;
            Ok(())
        }
        (_, Some(observer)) => {
            let pids: Vec<i32> = waiters.iter().filter_map(|w| w.pid()).collect();
            observer.until_parked(&pids, newest.parked_as(pids.len(), 1), LIMIT).await
        }
        (_, None) => Err("a PostgreSQL waiter needs an observer".into()),
    }
}
