//! Describing a lock on one key (its kind, mode and lease options) and taking it: one acquire
//! statement, or a wait made of tries (see [`crate::waiting`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Object;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::Mode;
use super::guard::Guard;
use super::options::{LeaseOptions, Wait, lease_setters};
use super::request::Kind;
use super::state::{LeaseState, Timing};
use crate::args;
use crate::client::Client;
use crate::error::Error;
use crate::statements::primitives::REQUEST;
use crate::statements::rows::{self, Grant, Tried};
use crate::statements::{KEY_OWNER_TTL_WAIT, Statements};
use crate::waiting::Waits;

/// A lock being described: `client.lock("key").ttl(..).wait(..).acquire().await`.
///
/// Nothing happens until [`acquire`](Self::acquire) or [`try_acquire`](Self::try_acquire).
///
/// # Waiting
///
/// A [`wait`](Self::wait) holds no connection: the client's waiters of a key line up locally,
/// in arrival order, and only the head of the line talks to the server, in short tries — again
/// when the server notifies that the key was freed or the blocking lease runs out (behind a
/// transaction pooler: after growing pauses). See the crate docs, "Waiting". Across clients the
/// first to try after a release wins, and waits in the server's queue come first;
/// [`server_queue`](Self::server_queue) waits there instead, in strict arrival order across
/// every client. [`fast`](Self::fast) leases wait on the server (except behind a transaction
/// pooler), as do all waits of clients made with [`Client::from_pool`].
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until acquire() or try_acquire()"]
pub struct LockBuilder {
    client: Client,
    key: String,
    options: LeaseOptions,
    server_queue: bool,
    mode: Mode,
    kind: Kind,
}

impl LockBuilder {
    pub(crate) fn new(client: Client, key: String) -> LockBuilder {
        LockBuilder::of_kind(client, key, Kind::Exclusive)
    }

    /// A builder of `kind` (a semaphore's permit, an election's lead).
    pub(crate) fn of_kind(client: Client, key: String, kind: Kind) -> LockBuilder {
        LockBuilder {
            client,
            key,
            options: LeaseOptions::default(),
            server_queue: false,
            mode: Mode::Durable,
            kind,
        }
    }

    lease_setters!();

    /// A shared lease (a read lock, `dlock_acquire_shared`): any number of owners hold the key
    /// shared at once, and none while an exclusive lease holds it. Each shared holder's lease
    /// is its own (fence, ttl, watchdog, release), and a waiting exclusive request holds back
    /// later shared ones on the server, so writers do not starve. Asking for a key in the other
    /// mode than this owner holds it in is [`Error::ModeConflict`]. For a counting semaphore
    /// use [`Client::semaphore`]. Durable leases only ([`fast`](Self::fast) ones are exclusive).
    pub fn shared(mut self) -> Self {
        if !matches!(self.kind, Kind::Shared { .. }) {
            self.kind = Kind::Shared { max_holders: None };
        }
        self
    }

    /// A session-bound lease (`ttl NULL`): it never expires, and ends when released or when
    /// its session ends ([`ttl`](Self::ttl) makes it a TTL lease again). The guard keeps the
    /// pooled connection that took it for its whole life (that session *is* the lease), so no
    /// watchdog is needed — and none watches it: its [`lost`](Guard::lost) token fires only
    /// when [`Guard::renew`] finds the lease gone.
    ///
    /// Waits of this client run on other pooled connections, so the server cannot see a cycle
    /// of waits between clients that hold session-bound leases (its deadlock check needs the
    /// waiting session to be the holding one): give waits a limit when such cycles can form.
    ///
    /// Refused with [`Error::Unsupported`] behind a transaction pooler
    /// ([`PoolerMode::Transaction`](crate::PoolerMode::Transaction)): there the lease's session
    /// would be whichever server connection the pooler lent, which outlives the client's.
    pub fn session_bound(mut self) -> Self {
        self.options.ttl = None;
        self
    }

    /// Wait in the server's queue (`dlock_acquire(..., wait)`) instead of on the client's
    /// listener: strict arrival order across every client, and PostgreSQL's deadlock detector
    /// sees waits between session-bound leases of one session, at the price of one pooled
    /// connection per waiter for the length of its wait. Always so for clients made with
    /// [`Client::from_pool`], which have no listener. Refused with [`Error::Unsupported`]
    /// behind a transaction pooler, where each such wait would hold one of the pooler's few
    /// server connections, and enough of them keep every holder from releasing.
    pub fn server_queue(mut self) -> Self {
        self.server_queue = true;
        self
    }

    /// A fast-mode lease (`dlock_fast_acquire`; the server must preload dlock): kept in the
    /// server's shared memory with no WAL, for Redis-like speed and durability. Mutual
    /// exclusion holds while the server runs; after a restart or crash the server grants no
    /// fast key for `dlock.fast_max_ttl` (so leases from before have run out), and fences keep
    /// growing. Calls are not transactional. The ttl must be at most `dlock.fast_max_ttl`
    /// (default 60 s) and session-bound leases are refused; a wait holds a pooled connection
    /// (it waits on the server, not in arrival order) — except behind a transaction pooler,
    /// where it retries. Fast keys are a key space of their own: a fast and a durable lease on
    /// the same key do not exclude each other.
    pub fn fast(mut self) -> Self {
        self.mode = Mode::Fast;
        self
    }

    /// The key this builder locks.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The client this builder takes the lock through.
    #[cfg(test)]
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Takes the lock: a [`Guard`], or [`Error::NotAcquired`] when another owner holds the key
    /// and no wait was set, or [`Error::Timeout`] when the wait elapsed.
    pub async fn acquire(self) -> Result<Guard, Error> {
        let waited = self.options.wait != Wait::No;
        match self.try_acquire().await? {
            Some(guard) => Ok(guard),
            None if waited => Err(Error::Timeout),
            None => Err(Error::NotAcquired),
        }
    }

    /// Takes the lock if it can (within the wait, if one was set): `None` when another owner
    /// keeps the key.
    ///
    /// A wait holds no pooled connection while it sleeps (see the crate docs, "Waiting"),
    /// unless [`server_queue`](Self::server_queue) is set, the lease is [`fast`](Self::fast),
    /// or the client came from [`Client::from_pool`]. Dropping this future mid-wait leaves no
    /// trace; if it is dropped while a statement is in flight, that connection is closed rather
    /// than pooled, so the server drops the call (a grant that had already committed ends by
    /// its ttl, or at once for a session-bound lease).
    pub async fn try_acquire(self) -> Result<Option<Guard>, Error> {
        let (key, waits) = (self.key.clone(), self.options.wait != Wait::No);
        crate::telemetry::acquire(&key, waits, Guard::fence, self.try_acquire_untraced()).await
    }

    /// [`try_acquire`](Self::try_acquire) without its span.
    async fn try_acquire_untraced(self) -> Result<Option<Guard>, Error> {
        self.check()?;
        let statements = self.client.statements().await?;
        let Some(waits) = self.local_waits() else {
            let statement = self.calls(&statements).acquire;
            return Ok(self
                .send(&statements, statement, self.options.wait.seconds(), rows::acquired)
                .await?
                .granted());
        };
        let deadline = self.options.wait.deadline();
        // Nobody of ours in line for the key: one try is all it takes when it is free.
        if !waits.has_line(self.mode, &self.key)
            && let Tried::Granted(guard) = self.try_once(&statements, waits.settle(deadline)).await?
        {
            return Ok(Some(guard));
        }
        let place = waits.enter(self.mode, &self.key);
        let waiting = place.wait(deadline, &statements, |settle| self.try_once(&statements, settle));
        crate::telemetry::wait(&self.key, Guard::fence, waiting).await
    }

    /// The client's local lines, when this acquire waits there (see [`crate::waiting`]) rather
    /// than with one statement on the server.
    fn local_waits(&self) -> Option<&Arc<Waits>> {
        if self.options.wait == Wait::No || self.server_queue {
            return None;
        }
        self.client.shared.waits.as_ref().filter(|waits| waits.can_wait_for(self.mode))
    }

    /// The arguments, checked by the contract's rules before anything is sent (the server
    /// checks them too): a call must not wait behind the client's line for a key only to be
    /// refused. Then what the client cannot do in its mode.
    fn check(&self) -> Result<(), Error> {
        let (owner, ttl) = (&*self.client.owner, self.options.ttl);
        match (&self.kind, self.mode) {
            (Kind::Leader { info }, _) => {
                args::election(&self.key, owner)?;
                args::info(info.as_deref())?;
                args::ttl(ttl)?;
            }
            (_, Mode::Durable) => {
                args::key(&self.key)?;
                args::owner(owner)?;
                args::ttl(ttl)?;
            }
            (_, Mode::Fast) => {
                args::fast_key_owner(&self.key, owner)?;
                args::fast_ttl(ttl)?;
            }
        }
        args::max_holders(self.kind.max_holders())?;
        if self.mode == Mode::Fast && (self.kind != Kind::Exclusive || !self.options.lock_delay.is_zero()) {
            return Err(Error::Unsupported(
                "fast-mode leases are exclusive and have no lock-delay: take shared leases, \
                 semaphores and lock-delays as durable leases"
                    .into(),
            ));
        }
        let behind_transaction_pooler = self.client.shared.pooler.is_transaction();
        if self.server_queue && self.options.wait != Wait::No && behind_transaction_pooler {
            return Err(Error::Unsupported(
                "a wait in the server's queue through a transaction pooler: it would hold one of \
                 the pooler's server connections for its length, and waits that fill them keep \
                 the holders' releases and renewals from running; without server_queue() the \
                 wait retries instead"
                    .into(),
            ));
        }
        if ttl.is_none() && behind_transaction_pooler {
            return Err(Error::Unsupported(
                "a session-bound lease through a transaction pooler: its session would be \
                 whichever server connection the pooler lent for the call, which neither ends \
                 with this client nor carries its later calls; give the lease a ttl"
                    .into(),
            ));
        }
        Ok(())
    }

    /// One try that never queues: `try_acquire`, waiting on the server at most `settle` for a
    /// transaction changing the key, where the mode has it; else `acquire` without a wait.
    async fn try_once(
        &self,
        statements: &Arc<Statements>,
        settle: Option<Duration>,
    ) -> Result<Tried<Guard>, Error> {
        let calls = self.calls(statements);
        match calls.try_once {
            // Version 2's tries never wait: the settle time only applies to dlock_try_acquire.
            Some(statement) => {
                self.send(statements, statement, settle.map(|s| s.as_secs_f64()), rows::tried).await
            }
            None => self.send(statements, calls.acquire, Some(0.0), rows::acquired).await,
        }
    }

    /// The statements that take this builder's lease.
    fn calls<'a>(&self, statements: &'a Statements) -> super::request::Calls<'a> {
        self.kind.calls(self.mode, self.options.lock_delay, statements)
    }

    /// One acquire `statement` (with a wait, or a settle time) on a pooled connection, its
    /// answer read by `parse`.
    async fn send(
        &self,
        statements: &Arc<Statements>,
        statement: &str,
        wait: Option<f64>,
        parse: fn(&Row) -> Result<Tried<Grant>, Error>,
    ) -> Result<Tried<Guard>, Error> {
        let mut connection = InFlight(Some(self.client.pool.get().await?));
        let ttl = self.options.ttl.map(|t| t.as_secs_f64());
        let lock_delay = self.options.lock_delay.as_secs_f64();
        let max_holders = args::max_holders(self.kind.max_holders())?;
        let info = self.kind.info();
        let sent = Instant::now();
        let values: [&(dyn ToSql + Sync); 7] =
            [&self.key, &&*self.client.owner, &ttl, &wait, &lock_delay, &max_holders, &info];
        let (types, values): (&[_], &[_]) =
            if self.calls(statements).v2 { (&REQUEST, &values) } else { (&KEY_OWNER_TTL_WAIT, &values[..4]) };
        let answer = self.client.protocol().query_one(connection.get(), statement, types, values).await;
        // An answer, even an error, means the statement is over: the connection is reusable.
        let object = connection.finish();
        Ok(match parse(&answer?)? {
            Tried::Granted(grant) => Tried::Granted(self.guard(statements, grant, sent, object)),
            Tried::Busy(retry_after) => Tried::Busy(retry_after),
        })
    }

    /// The guard of `grant`, answered to a statement sent at `sent` on `object`.
    fn guard(&self, statements: &Arc<Statements>, grant: Grant, sent: Instant, object: Object) -> Guard {
        let ttl = self.options.ttl;
        // The server's expiry is its grant time plus the ttl; read just after the grant.
        let expires_at = ttl.map(|ttl| grant.server_now + ttl);
        // A local deadline no later than the server's expiry, give or take the microseconds
        // between the grant and the clock reading: the grant happened at most
        // `server_elapsed` after the server received the statement, which was after `sent`.
        let deadline = ttl.map(|ttl| sent + grant.server_elapsed() + ttl);
        tracing::debug!(key = %self.key, fence = grant.fence, "dlock: acquired");
        let state = LeaseState::new(
            self.client.clone(),
            statements.clone(),
            self.key.clone(),
            grant.fence,
            ttl,
            self.mode,
            Timing { expires_at, deadline },
        );
        let renew_every = self.options.renewal_interval();
        // Session-bound: the connection is the lease's session and stays with the guard.
        let session = if ttl.is_none() { Some(object) } else { None };
        Guard::new(state, session, renew_every)
    }
}

/// A pooled connection with a statement in flight: if the future owning it is dropped before
/// the answer arrived, the connection is closed rather than pooled, so the server notices the
/// hang-up and forgets the waiter (and a session-bound grant with it).
pub(crate) struct InFlight(pub(crate) Option<Object>);

impl InFlight {
    pub(crate) fn get(&mut self) -> &mut Object {
        self.0.as_mut().expect("connection taken")
    }

    /// The answer arrived: the connection is an ordinary pooled one again.
    pub(crate) fn finish(mut self) -> Object {
        self.0.take().expect("connection taken")
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            // Detached from the pool; dropping the client closes the connection.
            drop(Object::take(object));
        }
    }
}
