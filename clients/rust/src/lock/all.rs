//! Multi-key locks: every key of a list exclusively, or none (`dlock_acquire_all`), held by one
//! guard with one watchdog.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

use super::builder::InFlight;
use super::guard::Guard;
use super::options::{DEFAULT_TTL, LeaseOptions, Wait, lease_setters};
use super::state::{AllKeys, LeaseState, Timing};
use crate::args;
use crate::client::Client;
use crate::error::Error;
use crate::statements::Statements;
use crate::statements::primitives::KEYS_OWNER_TTL_WAIT_DELAY;
use crate::statements::rows::Tried;
use crate::waiting;

/// A multi-key lock being described: `client.lock_all(["a", "b"]).ttl(..).wait(..).acquire()`.
///
/// Every key is taken exclusively, or none is: the server never holds a subset, and takes the
/// keys in one global order, so callers that list the same keys in different orders never
/// deadlock. At most 64 distinct keys (else [`Error::InvalidArgument`], before anything is
/// sent). The lease options are a [`LockBuilder`](crate::LockBuilder)'s, for every key.
///
/// # Waiting
///
/// A wait for the keys ([`wait`](Self::wait)) waits in the server's queue: it holds one pooled
/// connection for the length of the wait (the listener's one-key lines do not fit a request
/// for several keys at once). Behind a transaction pooler it retries instead, holding no server
/// connection between tries.
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until acquire() or try_acquire()"]
pub struct LockAllBuilder {
    client: Client,
    keys: Vec<String>,
    /// Its ttl is never `None`: a multi-key lock cannot be session-bound.
    options: LeaseOptions,
}

impl LockAllBuilder {
    pub(crate) fn new(client: Client, keys: Vec<String>) -> LockAllBuilder {
        LockAllBuilder { client, keys, options: LeaseOptions::default() }
    }

    lease_setters!();

    /// The keys this builder locks.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The client this builder takes the locks through.
    #[cfg(test)]
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Takes every key: a [`MultiGuard`], or [`Error::NotAcquired`] when another owner holds
    /// one of them and no wait was set, or [`Error::Timeout`] when the wait elapsed.
    pub async fn acquire(self) -> Result<MultiGuard, Error> {
        let waited = self.options.wait != Wait::No;
        match self.try_acquire().await? {
            Some(guard) => Ok(guard),
            None if waited => Err(Error::Timeout),
            None => Err(Error::NotAcquired),
        }
    }

    /// Takes every key if it can (within the wait, if one was set): `None` when some key stays
    /// held by another owner.
    pub async fn try_acquire(self) -> Result<Option<MultiGuard>, Error> {
        let (keys, waits) = (self.keys.clone(), self.options.wait != Wait::No);
        let fences = |guard: &MultiGuard| tracing::field::debug(guard.fences().to_vec());
        let keys = tracing::field::debug(&keys);
        crate::telemetry::acquire(keys, waits, fences, self.try_acquire_untraced()).await
    }

    /// [`try_acquire`](Self::try_acquire) without its span.
    async fn try_acquire_untraced(self) -> Result<Option<MultiGuard>, Error> {
        args::keys(&self.keys)?;
        args::owner(&self.client.owner)?;
        args::ttl(Some(self.lease_ttl()))?;
        let statements = self.client.statements().await?;
        let retry = self.client.shared.waits.as_ref().and_then(|waits| waits.max_poll_interval());
        let wait = self.options.wait;
        let granted = match (wait, retry) {
            (Wait::No, _) => self.send(&statements, Some(0.0)).await?.granted(),
            // Behind a transaction pooler nothing may hold a server connection while it waits.
            (Wait::Up(_) | Wait::Forever, Some(max_interval)) => {
                waiting::retry(wait.deadline(), max_interval, |_| self.send(&statements, Some(0.0))).await?
            }
            (Wait::Up(_) | Wait::Forever, None) => self.send(&statements, wait.seconds()).await?.granted(),
        };
        Ok(granted)
    }

    /// One `dlock_acquire_all` waiting up to `wait` seconds (NULL: without limit).
    async fn send(
        &self,
        statements: &Arc<Statements>,
        wait: Option<f64>,
    ) -> Result<Tried<MultiGuard>, Error> {
        let mut connection = InFlight(Some(self.client.pool.get().await?));
        let (ttl, delay) = (self.lease_ttl().as_secs_f64(), self.options.lock_delay.as_secs_f64());
        let values: [&(dyn ToSql + Sync); 5] = [&self.keys, &&*self.client.owner, &ttl, &wait, &delay];
        let sent = Instant::now();
        let statement = &statements.primitives.acquire_all;
        let answer = self
            .client
            .protocol()
            .query_one(connection.get(), statement, &KEYS_OWNER_TTL_WAIT_DELAY, &values)
            .await;
        drop(connection.finish());
        Ok(match granted(&answer?)? {
            Some(grant) => Tried::Granted(self.guard(statements, grant, sent)),
            None => Tried::Busy(None),
        })
    }

    /// The ttl of every key's lease.
    fn lease_ttl(&self) -> Duration {
        // Only `LockBuilder::session_bound` clears a ttl, and this builder has none.
        self.options.ttl.unwrap_or(DEFAULT_TTL)
    }

    fn guard(&self, statements: &Arc<Statements>, grant: AllGrant, sent: Instant) -> MultiGuard {
        let ttl = self.lease_ttl();
        let server_elapsed = grant.server_now.duration_since(grant.statement_start).unwrap_or_default();
        let timing =
            Timing { expires_at: Some(grant.server_now + ttl), deadline: Some(sent + server_elapsed + ttl) };
        tracing::debug!(keys = ?self.keys, fences = ?grant.fences, "dlock: acquired all");
        let all = AllKeys::new(self.keys.clone(), grant.fences);
        let state = LeaseState::new_all(self.client.clone(), statements.clone(), all, ttl, timing);
        let renew_every = self.options.renewal_interval();
        MultiGuard { guard: Guard::new(state, None, renew_every) }
    }
}

/// A grant of every key.
struct AllGrant {
    fences: Vec<i64>,
    server_now: SystemTime,
    statement_start: SystemTime,
}

/// `acquire_all`'s answer: the fences (NULL when not granted) and the two clock readings.
fn granted(row: &Row) -> Result<Option<AllGrant>, Error> {
    let Some(fences) = row.try_get::<_, Option<Vec<i64>>>(0)? else { return Ok(None) };
    Ok(Some(AllGrant { fences, server_now: row.try_get(1)?, statement_start: row.try_get(2)? }))
}

/// Every key of a [`LockAllBuilder`], held together: one watchdog renews them all, [`lost`]
/// fires if any of them is lost, and releasing (or dropping) gives back all of them.
///
/// [`lost`]: Self::lost
#[must_use = "dropping a guard releases the locks at once"]
#[derive(Debug)]
pub struct MultiGuard {
    guard: Guard,
}

impl MultiGuard {
    fn all(&self) -> &AllKeys {
        self.guard.state().all.as_ref().expect("a multi-key guard has its keys")
    }

    /// The keys, in the order they were asked for.
    pub fn keys(&self) -> &[String] {
        &self.all().keys
    }

    /// The fence of each key, in the order of [`keys`](Self::keys).
    pub fn fences(&self) -> &[i64] {
        &self.all().fences
    }

    /// When the leases end unless renewed, as last known (server clock; the earliest of them).
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.guard.expires_at()
    }

    /// Whether every lease is still ours as far as this process knows.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// A token that fires when any of the leases is lost while the guard still wants them.
    pub fn lost(&self) -> CancellationToken {
        self.guard.lost()
    }

    /// Renews every key now: the earliest new expiry, or [`Error::LockLost`] if any of them is
    /// no longer ours (which fires [`lost`](Self::lost)).
    pub async fn renew(&self) -> Result<Option<SystemTime>, Error> {
        self.guard.renew().await
    }

    /// Whether every key's live lease still carries its fence (`dlock_holds`).
    pub async fn holds(&self) -> Result<bool, Error> {
        self.guard.holds().await
    }

    /// Gives back every key now: `true` if every lease was still ours.
    pub async fn release(self) -> Result<bool, Error> {
        self.guard.release().await
    }

    /// Lets go without releasing: the leases stay until their ttl runs out.
    pub fn leak(self) {
        self.guard.leak();
    }
}
