//! A held lease: the guard that owns it, and `Lease`, the view of it that work can carry around.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Object;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::state::LeaseState;
use super::watchdog;
use crate::error::Error;

/// A lease as a plain record (for logs and `--json` output).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockInfo {
    /// The locked key.
    pub key: String,
    /// The owner identity the lease is held as.
    pub owner: String,
    /// The fence token of the grant.
    pub fence: i64,
    /// When the lease ends unless renewed, as last known (server clock); `None` if session-bound.
    pub expires_at: Option<SystemTime>,
}

/// A cloneable, read-only view of a held lease, for the work done under it (e.g. to pass the
/// fence along, or to stop when [`lost`](Self::lost) fires). It does not keep the lease: the
/// [`Guard`] does.
#[derive(Clone)]
pub struct Lease {
    state: Arc<LeaseState>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.state.key)
            .field("fence", &self.state.fence)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Lease {
    /// The locked key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The fence token: larger than any earlier grant's of this key. Pass it with every write
    /// the lock protects (`... WHERE dlock_holds(key, fence)`), so a stale holder's are refused.
    pub fn fence(&self) -> i64 {
        self.state.fence
    }

    /// The owner identity the lease is held as.
    pub fn owner(&self) -> &str {
        &self.state.client.owner
    }

    /// When the lease ends unless renewed, as last known from the server (server clock; a
    /// renewal moves it). `None` for a session-bound lease.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.state.expires_at()
    }

    /// Whether the lease is still ours as far as this process knows, without asking the server:
    /// not released, not lost, and its ttl not run out by the local clock.
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// A token that fires when the lease is lost while the guard still wants it: a renewal
    /// answered that it is no longer ours, renewals failed until the ttl ran out, or the ttl
    /// ran out unrenewed. It does not fire on release. (Cancelling the returned token itself
    /// changes nothing: it is a child of the guard's.)
    pub fn lost(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    /// Asks the server whether the live lease on the key still carries this fence
    /// (`dlock_holds`), e.g. from the work [`Client::with_lock`](crate::Client::with_lock)
    /// runs. Changes nothing. (A session-bound lease is asked about on a pooled connection, not
    /// on its own session, which its guard keeps.)
    pub async fn holds(&self) -> Result<bool, Error> {
        self.state.holds(None).await
    }

    /// The lease as a plain record.
    pub fn info(&self) -> LockInfo {
        LockInfo {
            key: self.state.key.clone(),
            owner: self.state.client.owner.to_string(),
            fence: self.state.fence,
            expires_at: self.expires_at(),
        }
    }
}

/// A held lock. Each guard is one hold of the lease (a reentrant acquire by the same owner
/// returns another guard with the same fence and adds a hold; the key is free once every guard
/// has let go).
///
/// Letting go:
/// - [`release`](Self::release) gives the hold back now and says whether it was still ours;
/// - dropping the guard inside a tokio runtime releases it in a background task; dropped
///   outside one, a TTL lease is left to run out its ttl and a session-bound one ends at once
///   (its connection is closed rather than pooled);
/// - [`leak`](Self::leak) keeps the lease on the server without managing it.
#[must_use = "dropping a guard releases the lock at once"]
pub struct Guard {
    lease: Lease,
    /// The connection of a session-bound lease: its session is what keeps the lease.
    session: Option<Object>,
    /// Set once released or leaked, so that `Drop` does nothing more.
    finished: bool,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.key())
            .field("fence", &self.fence())
            .field("session_bound", &self.session.is_some())
            .field("held", &self.is_held())
            .finish()
    }
}

impl Guard {
    pub(crate) fn new(
        state: Arc<LeaseState>,
        session: Option<Object>,
        renew_every: Option<Duration>,
    ) -> Guard {
        if state.ttl.is_some() {
            // Renews every `renew_every`, or only watches the ttl run out when that is None.
            watchdog::spawn(state.clone(), renew_every);
        }
        Guard { lease: Lease { state }, session, finished: false }
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// The state this guard shares with its views and watchdog.
    pub(super) fn state(&self) -> &LeaseState {
        &self.lease.state
    }

    /// The fence token of this grant (see [`Lease::fence`]).
    pub fn fence(&self) -> i64 {
        self.lease.fence()
    }

    /// When the lease ends unless renewed, as last known (server clock); `None` if session-bound.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.lease.expires_at()
    }

    /// Whether the lease is still ours as far as this process knows (see [`Lease::is_held`]).
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// A token that fires when the lease is lost (see [`Lease::lost`]).
    pub fn lost(&self) -> CancellationToken {
        self.lease.lost()
    }

    /// A view of the lease to hand to the work it protects.
    pub fn lease(&self) -> Lease {
        self.lease.clone()
    }

    /// The lease as a plain record.
    pub fn info(&self) -> LockInfo {
        self.lease.info()
    }

    /// Renews the lease now for another ttl: the new expiry (`None` for a session-bound lease,
    /// which is only checked), or [`Error::LockLost`] if it is no longer ours — which also
    /// fires [`lost`](Self::lost).
    pub async fn renew(&self) -> Result<Option<SystemTime>, Error> {
        let state = &self.lease.state;
        if state.ttl.is_none() {
            return if self.holds().await? {
                Ok(None)
            } else {
                state.mark_lost("the session-bound lease is gone");
                Err(Error::LockLost)
            };
        }
        match state.renew_ttl().await? {
            Some(expires_at) => Ok(Some(expires_at)),
            None => {
                state.mark_lost("renewal answered that the lease is no longer ours");
                Err(Error::LockLost)
            }
        }
    }

    /// Asks the server whether the live lease on the key still carries this guard's fence
    /// (`dlock_holds`). Changes nothing.
    pub async fn holds(&self) -> Result<bool, Error> {
        self.lease.state.holds(self.session.as_ref()).await
    }

    /// Gives this hold back now: `true` if the lease was still ours, `false` if it had already
    /// ended (expired, force-released). Stops the watchdog first.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.finished = true;
        self.lease.state.ended.cancel();
        release(self.lease.state.clone(), self.session.take()).await
    }

    /// Lets go of the guard without releasing: no more renewals, and the lease stays on the
    /// server until its ttl runs out. A session-bound lease goes back to the pool with its
    /// connection and lasts as long as that pooled connection (or until this owner releases it).
    pub fn leak(mut self) {
        self.finished = true;
        self.lease.state.ended.cancel();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.lease.state.ended.cancel();
        let state = self.lease.state.clone();
        let session = self.session.take();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = release(state.clone(), session).await {
                        tracing::warn!(key = %state.key, error = %e, "dlock: release of a dropped guard failed");
                    }
                });
            }
            // No runtime to talk to the server: a TTL lease runs out by itself; closing a
            // session-bound lease's connection ends its session and with it the lease.
            Err(_) => drop(session.map(Object::take)),
        }
    }
}

/// One `dlock_release`: on the lease's own session when session-bound, else through the pool.
async fn release(state: Arc<LeaseState>, session: Option<Object>) -> Result<bool, Error> {
    let outcome = crate::telemetry::release(&state.key, state.fence, state.release(session.as_ref())).await;
    if outcome.is_err()
        && let Some(session) = session
    {
        // Not sure the release happened: closing the session ends a session-bound lease anyway.
        drop(Object::take(session));
    }
    tracing::debug!(key = %state.key, fence = state.fence, ?outcome, "dlock: released");
    outcome
}
