//! Calls on leases named by their key rather than held through a guard: the live leases, and
//! renewing, releasing or force-releasing by key (for scripts, the CLI and administrators).

use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio_postgres::types::ToSql;

use crate::args;
use crate::client::Client;
use crate::error::Error;
use crate::lock::MAX_DURATION;
use crate::statements::{KEY, KEY_OWNER, KEY_OWNER_TTL};

/// A live lease as `dlock_locks` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LiveLease {
    /// The locked key.
    pub key: String,
    /// The owner, if the lease is the caller's role's (or the caller is a `dlock_admin` member
    /// or superuser); `None` otherwise.
    pub owner: Option<String>,
    /// The fence token of the grant.
    pub fence: i64,
    /// How many holds the owner has (reentrant acquires).
    pub hold_count: i64,
    /// When the lease ends unless renewed (server clock); `None` if session-bound.
    pub expires_at: Option<SystemTime>,
    /// The role that took the lease.
    pub holder_role: Option<String>,
    /// How many sessions wait on the key on the server.
    pub waiters: i64,
}

/// When a lease renewed by key now ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// At this time (server clock).
    At(SystemTime),
    /// Never by itself: a session-bound lease, which ends with its session.
    Never,
}

impl Client {
    /// The live leases (`dlock_locks`), ordered by key. Owners of other roles' leases are
    /// `None` unless the role is a `dlock_admin` member or a superuser.
    pub async fn locks(&self) -> Result<Vec<LiveLease>, Error> {
        let statements = self.statements().await?;
        let connection = self.pool.get().await?;
        let rows = self.protocol().query(&connection, &statements.locks, &[], &[]).await?;
        rows.iter()
            .map(|row| {
                Ok(LiveLease {
                    key: row.try_get(0)?,
                    owner: row.try_get(1)?,
                    fence: row.try_get(2)?,
                    hold_count: row.try_get(3)?,
                    expires_at: row.try_get(4)?,
                    holder_role: row.try_get(5)?,
                    waiters: row.try_get(6)?,
                })
            })
            .collect()
    }

    /// Renews this owner's lease on `key` for `ttl` from now (`dlock_renew`), without a guard:
    /// one taken by an earlier process as the same owner, or leaked. `None` if the lease is
    /// not this owner's (or already gone).
    pub async fn renew_lease(&self, key: &str, ttl: Duration) -> Result<Option<Expiry>, Error> {
        args::key(key)?;
        args::owner(&self.owner)?;
        args::ttl(Some(ttl))?;
        let statements = self.statements().await?;
        let connection = self.pool.get().await?;
        let values: [&(dyn ToSql + Sync); 3] = [&key, &&*self.owner, &ttl.min(MAX_DURATION).as_secs_f64()];
        let row =
            self.protocol().query_one(&connection, &statements.renew_by_key, &KEY_OWNER_TTL, &values).await?;
        let expires_at: Option<SystemTime> = row.try_get(0)?;
        let ours: bool = row.try_get(1)?;
        Ok(ours.then_some(expires_at.map_or(Expiry::Never, Expiry::At)))
    }

    /// Gives back one hold of this owner's lease on `key` (`dlock_release`), without a guard:
    /// `true` if the lease was this owner's, `false` if not (or already gone).
    pub async fn release_lease(&self, key: &str) -> Result<bool, Error> {
        args::key(key)?;
        args::owner(&self.owner)?;
        let statements = self.statements().await?;
        let connection = self.pool.get().await?;
        let values: [&(dyn ToSql + Sync); 2] = [&key, &&*self.owner];
        Ok(self
            .protocol()
            .query_one(&connection, &statements.release, &KEY_OWNER, &values)
            .await?
            .try_get(0)?)
    }

    /// Frees `key` whoever holds it (`dlock_force_release`): `true` if it was held. For
    /// administrators: the role must be a `dlock_admin` member or a superuser, else
    /// [`Error::PermissionDenied`]. The holder finds out at its next renewal.
    pub async fn force_release(&self, key: &str) -> Result<bool, Error> {
        args::key(key)?;
        let statements = self.statements().await?;
        let connection = self.pool.get().await?;
        Ok(self
            .protocol()
            .query_one(&connection, &statements.force_release, &KEY, &[&key])
            .await?
            .try_get(0)?)
    }
}
