//! Describing a lock (ttl, wait, watchdog) and taking it: one `dlock_acquire` statement.

use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::Object;

use crate::client::Client;
use crate::error::{Error, ServerMessage};
use crate::guard::{Guard, LeaseState};
use crate::sql;
use crate::waiting::Tried;

/// The ttl of a lease unless [`LockBuilder::ttl`] says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Longer durations are taken as this (about 285,000 years): PostgreSQL's intervals and the
/// clocks' arithmetic end not far beyond, and nothing real waits or lives that long.
pub const MAX_DURATION: Duration = Duration::from_secs(9_000_000_000_000);

/// Longest key and owner the server accepts, in bytes (the contract's limits).
const MAX_KEY_BYTES: usize = 1024;
const MAX_OWNER_BYTES: usize = 256;
/// The same for fast-mode leases (fixed-size entries in the server's shared memory).
const MAX_FAST_KEY_BYTES: usize = 256;
const MAX_FAST_OWNER_BYTES: usize = 128;

/// How long an acquire may wait for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Answer at once (`wait => 0`).
    No,
    /// Wait on the server up to this long.
    Up(Duration),
    /// Wait without limit (`wait => NULL`).
    Forever,
}

/// A lock being described: `client.lock("key").ttl(..).wait(..).acquire().await`.
///
/// Nothing happens until [`acquire`](Self::acquire) or [`try_acquire`](Self::try_acquire).
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until acquire() or try_acquire()"]
pub struct LockBuilder {
    client: Client,
    key: String,
    /// `None`: session-bound.
    ttl: Option<Duration>,
    wait: Wait,
    watchdog: bool,
    renew_every: Option<Duration>,
    server_queue: bool,
    fast: bool,
}

impl LockBuilder {
    pub(crate) fn new(client: Client, key: String) -> LockBuilder {
        LockBuilder {
            client,
            key,
            ttl: Some(DEFAULT_TTL),
            wait: Wait::No,
            watchdog: true,
            renew_every: None,
            server_queue: false,
            fast: false,
        }
    }

    /// The lease's time to live (default 30 s): it ends by itself this long after the last
    /// grant or renewal, if the holder dies. Undoes [`session_bound`](Self::session_bound).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl.min(MAX_DURATION));
        self
    }

    /// A session-bound lease (`ttl NULL`): it never expires, and ends when released or when
    /// its session ends. The guard keeps the pooled connection that took it for its whole life
    /// (that session *is* the lease), so no watchdog is needed — and none watches it: its
    /// [`lost`](Guard::lost) token fires only when [`Guard::renew`] finds the lease gone.
    ///
    /// Waits of this client run on other pooled connections, so the server cannot see a cycle
    /// of waits between clients that hold session-bound leases (its deadlock check needs the
    /// waiting session to be the holding one): give waits a limit when such cycles can form.
    pub fn session_bound(mut self) -> Self {
        self.ttl = None;
        self
    }

    /// Wait up to `wait` for the key if another owner holds it (the server does the waiting,
    /// in arrival order). [`acquire`](Self::acquire) then fails with [`Error::Timeout`] when
    /// it elapses. Default: no wait.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = if wait.is_zero() { Wait::No } else { Wait::Up(wait.min(MAX_DURATION)) };
        self
    }

    /// Wait in the server's queue (`dlock_acquire(..., wait)`) instead of on the client's
    /// listener: strict arrival order across every client, and PostgreSQL's deadlock detector
    /// sees waits between session-bound leases of one session, at the price of one pooled
    /// connection per waiter for the length of its wait. Always so for clients made with
    /// [`Client::from_pool`], which have no listener.
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
    /// (it waits on the server, not in arrival order). Fast keys are a key space of their own:
    /// a fast and a durable lease on the same key do not exclude each other.
    pub fn fast(mut self) -> Self {
        self.fast = true;
        self
    }

    /// Wait for the key without limit (until cancelled, `statement_timeout`, or disconnect).
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// Whether a background task renews the lease while the guard lives (default: on). Off
    /// gives a fixed lease that ends at its ttl unless [`Guard::renew`] is called; either way
    /// the guard's [`lost`](Guard::lost) token fires when the lease runs out.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// How often the watchdog renews (default: a third of the ttl, so two renewals can fail
    /// before the lease runs out). Turns the watchdog on.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.watchdog = true;
        self.renew_every = Some(every.min(MAX_DURATION));
        self
    }

    /// The key this builder locks.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Takes the lock: a [`Guard`], or [`Error::NotAcquired`] when another owner holds the key
    /// and no wait was set, or [`Error::Timeout`] when the wait elapsed.
    pub async fn acquire(self) -> Result<Guard, Error> {
        let waited = self.wait != Wait::No;
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
    /// unless [`server_queue`](Self::server_queue) is set or the client came from
    /// [`Client::from_pool`]. Dropping this future mid-wait leaves no trace; if it is dropped
    /// while a statement is in flight, that connection is closed rather than pooled, so the
    /// server drops the call (a grant that had already committed ends by its ttl, or at once
    /// for a session-bound lease).
    pub async fn try_acquire(self) -> Result<Option<Guard>, Error> {
        self.check()?;
        let waits = match (&self.client.waits, self.wait) {
            (Some(waits), Wait::Up(_) | Wait::Forever) if !self.server_queue && !self.fast => waits.clone(),
            (_, wait) => {
                let wait = match wait {
                    Wait::No => Some(0.0),
                    Wait::Up(wait) => Some(wait.as_secs_f64()),
                    Wait::Forever => None,
                };
                let statement = if self.fast { sql::FAST_ACQUIRE } else { sql::ACQUIRE };
                return Ok(self.once(statement, wait).await?.granted());
            }
        };
        let deadline = match self.wait {
            Wait::Up(wait) => Some(tokio::time::Instant::now() + wait),
            _ => None,
        };
        let settle = |deadline: Option<tokio::time::Instant>| {
            deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()).as_secs_f64())
        };
        // Nobody of ours in line for the key: one try is all it takes when it is free.
        if !waits.has_line(&self.key)
            && let Tried::Granted(guard) = self.once(sql::TRY_ACQUIRE, settle(deadline)).await?
        {
            return Ok(Some(guard));
        }
        let place = waits.enter(&self.key);
        place.wait(deadline, |settle| self.once(sql::TRY_ACQUIRE, settle.map(|s| s.as_secs_f64()))).await
    }

    /// The contract's fixed limits, checked before anything is sent (the server checks them
    /// too): a call must not wait behind the client's line for a key only to be refused.
    /// `dlock.max_ttl` is the server's alone.
    fn check(&self) -> Result<(), Error> {
        let refuse = |message: String| {
            Err(Error::InvalidArgument(ServerMessage {
                code: "22023".into(),
                message,
                detail: Some("checked by the client before sending".into()),
                hint: None,
            }))
        };
        let (max_key, max_owner) = if self.fast {
            (MAX_FAST_KEY_BYTES, MAX_FAST_OWNER_BYTES)
        } else {
            (MAX_KEY_BYTES, MAX_OWNER_BYTES)
        };
        for (what, value, max) in
            [("key", self.key.as_str(), max_key), ("owner", &*self.client.owner, max_owner)]
        {
            if value.is_empty() {
                return refuse(format!("dlock: {what} must not be empty"));
            }
            if value.len() > max {
                return refuse(format!(
                    "dlock: {what} is {} bytes long, the limit is {max} bytes",
                    value.len()
                ));
            }
        }
        if self.ttl.is_some_and(|ttl| ttl < Duration::from_micros(1)) {
            return refuse("dlock: ttl must be positive".into());
        }
        if self.fast && self.ttl.is_none() {
            return refuse("dlock: a fast-mode lease needs a ttl (it cannot be session-bound)".into());
        }
        Ok(())
    }

    /// One acquire statement (`sql::ACQUIRE` with a wait, or `sql::TRY_ACQUIRE` with a settle
    /// time) on a pooled connection.
    async fn once(&self, statement: &str, wait: Option<f64>) -> Result<Tried<Guard>, Error> {
        let mut connection = InFlight(Some(self.client.pool.get().await?));
        let ttl = self.ttl.map(|t| t.as_secs_f64());
        let sent = Instant::now();
        let answer = async {
            let statement = connection.get().prepare_cached(statement).await?;
            connection.get().query_one(&statement, &[&self.key, &&*self.client.owner, &ttl, &wait]).await
        }
        .await;
        // An answer, even an error, means the statement is over: the connection is reusable.
        let object = connection.finish();
        let row = answer?;
        let Some(fence) = row.try_get::<_, Option<i64>>(0)? else {
            let retry_after = if row.len() > 3 { row.try_get::<_, Option<f64>>(3)? } else { None };
            return Ok(Tried::Busy(retry_after.map(|s| Duration::from_secs_f64(s.max(0.0)))));
        };
        let server_now: SystemTime = row.try_get(1)?;
        let statement_start: SystemTime = row.try_get(2)?;
        let server_elapsed = server_now.duration_since(statement_start).unwrap_or_default();
        // The server's expiry is its grant time plus the ttl; read just after the grant.
        let expires_at = self.ttl.map(|ttl| server_now + ttl);
        // A local deadline no later than the server's expiry, give or take the microseconds
        // between the grant and the clock reading: the grant happened at most `server_elapsed`
        // after the server received the statement, which was after `sent`.
        let deadline = self.ttl.map(|ttl| sent + server_elapsed + ttl);
        tracing::debug!(key = %self.key, fence, "dlock: acquired");
        let state = LeaseState::new(
            self.client.clone(),
            self.key.clone(),
            fence,
            self.ttl,
            self.fast,
            expires_at,
            deadline,
        );
        let renew_every = match (self.ttl, self.watchdog) {
            (Some(ttl), true) => Some(self.renew_every.unwrap_or(ttl / 3)),
            _ => None,
        };
        // Session-bound: the connection is the lease's session and stays with the guard.
        let session = if self.ttl.is_none() { Some(object) } else { None };
        Ok(Tried::Granted(Guard::new(state, session, renew_every)))
    }
}

impl Tried<Guard> {
    fn granted(self) -> Option<Guard> {
        match self {
            Tried::Granted(guard) => Some(guard),
            Tried::Busy(_) => None,
        }
    }
}

/// A pooled connection with a statement in flight: if the future owning it is dropped before
/// the answer arrived, the connection is closed rather than pooled, so the server notices the
/// hang-up and forgets the waiter (and a session-bound grant with it).
struct InFlight(Option<Object>);

impl InFlight {
    fn get(&mut self) -> &mut Object {
        self.0.as_mut().expect("connection taken")
    }

    /// The answer arrived: the connection is an ordinary pooled one again.
    fn finish(mut self) -> Object {
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
