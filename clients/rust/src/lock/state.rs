//! What a guard, its `Lease` views and its watchdog share about one lease: kept apart from all
//! three so that each uses it without them using each other.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::Object;
use dlock_core::key::key_hash;
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

use super::Mode;
use crate::client::Client;
use crate::error::Error;
use crate::statements::call::Connection;
use crate::statements::primitives::{KEYS_FENCES, KEYS_OWNER, KEYS_OWNER_TTL};
use crate::statements::{KEY_FENCE, KEY_OWNER, KEY_OWNER_TTL, Statements};

/// What the guard, its `Lease` views and the watchdog share about one lease.
pub(crate) struct LeaseState {
    pub(crate) client: Client,
    /// The statements of the database the lease is in.
    pub(super) statements: Arc<Statements>,
    /// The key (for a multi-key lease, its keys joined, for messages).
    pub(crate) key: String,
    /// The fence (for a multi-key lease, its first key's).
    pub(crate) fence: i64,
    /// Every key of a multi-key lease (`lock_all`), renewed and released together; `None` for
    /// a lease of one key.
    pub(crate) all: Option<AllKeys>,
    /// `None`: session-bound.
    pub(crate) ttl: Option<Duration>,
    pub(super) mode: Mode,
    timing: Mutex<Timing>,
    /// Fired once the lease is known or presumed gone while still wanted.
    pub(super) lost: CancellationToken,
    /// Fired when the guard lets go (release, drop, leak): stops the watchdog.
    pub(crate) ended: CancellationToken,
}

/// The keys of a multi-key lease and their fences, in the order they were asked for.
#[derive(Debug, Clone)]
pub(crate) struct AllKeys {
    pub(crate) keys: Vec<String>,
    pub(crate) fences: Vec<i64>,
    /// The keys in the order the server locks keys in (by key hash, then text): renewals and
    /// releases of several keys in one transaction take their key locks in this order too, so
    /// that they never wait in a circle with a `dlock_acquire_all` of the same keys.
    locking_order: Vec<String>,
}

impl AllKeys {
    pub(crate) fn new(keys: Vec<String>, fences: Vec<i64>) -> AllKeys {
        let mut locking_order = keys.clone();
        locking_order.sort_by(|a, b| (key_hash(a), a).cmp(&(key_hash(b), b)));
        AllKeys { keys, fences, locking_order }
    }
}

/// When the lease ends: the server's answer, and a local monotonic deadline no later than it.
pub(crate) struct Timing {
    /// The server's expiry (its clock); `None` if session-bound.
    pub(crate) expires_at: Option<SystemTime>,
    /// The local deadline; `None` if session-bound.
    pub(crate) deadline: Option<Instant>,
}

impl LeaseState {
    pub(crate) fn new(
        client: Client,
        statements: Arc<Statements>,
        key: String,
        fence: i64,
        ttl: Option<Duration>,
        mode: Mode,
        timing: Timing,
    ) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            client,
            statements,
            key,
            mode,
            fence,
            all: None,
            ttl,
            timing: Mutex::new(timing),
            lost: CancellationToken::new(),
            ended: CancellationToken::new(),
        })
    }

    /// The state of a multi-key lease (durable, with a ttl).
    pub(crate) fn new_all(
        client: Client,
        statements: Arc<Statements>,
        all: AllKeys,
        ttl: Duration,
        timing: Timing,
    ) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            client,
            statements,
            key: all.keys.join(", "),
            mode: Mode::Durable,
            fence: all.fences.first().copied().unwrap_or_default(),
            all: Some(all),
            ttl: Some(ttl),
            timing: Mutex::new(timing),
            lost: CancellationToken::new(),
            ended: CancellationToken::new(),
        })
    }

    fn timing(&self) -> std::sync::MutexGuard<'_, Timing> {
        // The data is two plain values: still consistent after a panic elsewhere.
        self.timing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The local deadline of a TTL lease (`None` for a session-bound one).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.timing().deadline
    }

    pub(super) fn expires_at(&self) -> Option<SystemTime> {
        self.timing().expires_at
    }

    pub(super) fn is_held(&self) -> bool {
        !self.lost.is_cancelled()
            && !self.ended.is_cancelled()
            && self.deadline().is_none_or(|deadline| Instant::now() < deadline)
    }

    /// Marks the lease lost (once; later calls change nothing) and tells whoever listens.
    pub(crate) fn mark_lost(&self, reason: &str) {
        if !self.lost.is_cancelled() && !self.ended.is_cancelled() {
            tracing::warn!(key = %self.key, fence = self.fence, reason, "dlock: lease lost");
            crate::telemetry::lease_lost();
        }
        self.lost.cancel();
    }

    /// One `dlock_renew` of a TTL lease through the pool: the new expiry, or `None` if the
    /// lease is no longer ours.
    pub(crate) async fn renew_ttl(&self) -> Result<Option<SystemTime>, Error> {
        crate::telemetry::renew(&self.key, self.fence, self.renew_ttl_untraced()).await
    }

    /// [`renew_ttl`](Self::renew_ttl) without its span.
    async fn renew_ttl_untraced(&self) -> Result<Option<SystemTime>, Error> {
        let ttl = self.ttl.expect("renew_ttl of a session-bound lease");
        let connection = self.client.pool.get().await?;
        let sent = Instant::now();
        let protocol = self.client.protocol();
        let row = match &self.all {
            None => {
                let values: [&(dyn ToSql + Sync); 3] = [&self.key, &&*self.client.owner, &ttl.as_secs_f64()];
                let statement = self.mode.renew(&self.statements);
                protocol.query_one(&connection, statement, &KEY_OWNER_TTL, &values).await?
            }
            Some(all) => {
                let values: [&(dyn ToSql + Sync); 3] =
                    [&all.locking_order, &&*self.client.owner, &ttl.as_secs_f64()];
                let statement = &self.statements.primitives.renew_all;
                protocol.query_one(&connection, statement, &KEYS_OWNER_TTL, &values).await?
            }
        };
        let expires_at: Option<SystemTime> = row.try_get(0)?;
        if let Some(expires_at) = expires_at {
            let mut timing = self.timing();
            timing.expires_at = Some(expires_at);
            // The server computed the expiry after it received the statement, sent at `sent`.
            timing.deadline = timing.deadline.max(Some(sent + ttl));
        }
        Ok(expires_at)
    }

    /// One `dlock_holds` of this lease's fence (every key's, for a multi-key lease), on
    /// `session` if the lease has one.
    pub(super) async fn holds(&self, session: Option<&Object>) -> Result<bool, Error> {
        let connection = Connection::get(&self.client.pool, session).await?;
        let protocol = self.client.protocol();
        let row = match &self.all {
            None => {
                let statement = self.mode.holds(&self.statements);
                let values: [&(dyn ToSql + Sync); 2] = [&self.key, &self.fence];
                protocol.query_one(&connection, statement, &KEY_FENCE, &values).await?
            }
            Some(all) => {
                let statement = &self.statements.primitives.holds_all;
                let values: [&(dyn ToSql + Sync); 2] = [&all.keys, &all.fences];
                protocol.query_one(&connection, statement, &KEYS_FENCES, &values).await?
            }
        };
        Ok(row.try_get::<_, Option<bool>>(0)?.unwrap_or(false))
    }

    /// One `dlock_release` of a hold (of every key, for a multi-key lease), on `session` if the
    /// lease has one: whether it was (every key was) still ours.
    pub(super) async fn release(&self, session: Option<&Object>) -> Result<bool, Error> {
        let connection = Connection::get(&self.client.pool, session).await?;
        let protocol = self.client.protocol();
        let row = match &self.all {
            None => {
                let statement = self.mode.release(&self.statements);
                let values: [&(dyn ToSql + Sync); 2] = [&self.key, &&*self.client.owner];
                protocol.query_one(&connection, statement, &KEY_OWNER, &values).await?
            }
            Some(all) => {
                let statement = &self.statements.primitives.release_all;
                let values: [&(dyn ToSql + Sync); 2] = [&all.locking_order, &&*self.client.owner];
                protocol.query_one(&connection, statement, &KEYS_OWNER, &values).await?
            }
        };
        Ok(row.try_get::<_, Option<bool>>(0)?.unwrap_or(false))
    }
}
