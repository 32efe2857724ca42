//! Elections: campaigning for the lead of a named election (`dlock_campaign`), the leadership
//! guard that keeps it, who leads now (`dlock_leader`), and a stream of changes of leader.

mod observe;

use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

pub use observe::LeaderChanges;

use crate::args;
use crate::client::Client;
use crate::error::Error;
use crate::lock::{DEFAULT_TTL, Guard, Kind, LockBuilder};
use crate::statements::KEY;

/// An election, by name: `client.election("scheduler").campaign("host-a:8080").await`.
///
/// Its leader holds a lease on the election's name (so the name shares the key space of
/// locks: do not lock it as well). Its term is the lease's fence, so terms only grow, and
/// work done as leader can be fenced with it (`dlock_holds(election, term)`).
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    name: String,
    ttl: Duration,
    wait: Option<Duration>,
    lock_delay: Duration,
}

/// The current leader of an election, as `dlock_leader` shows it (never the candidate string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader published about itself when it campaigned (`None` if nothing).
    pub info: Option<String>,
    /// The leader's term: the fence of its lease.
    pub term: i64,
    /// When it became leader (server clock).
    pub since: SystemTime,
    /// When its lead ends unless renewed (server clock); `None` if bound to its session.
    pub expires_at: Option<SystemTime>,
}

impl Client {
    /// The election `name`: campaign for its lead, see who leads, observe changes.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            client: self.clone(),
            name: name.into(),
            ttl: DEFAULT_TTL,
            wait: None,
            lock_delay: Duration::ZERO,
        }
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client this election's calls go through.
    #[cfg(test)]
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The ttl of the leader's lease (default 30 s), renewed by a watchdog every third of it:
    /// how long a dead leader keeps the lead.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`campaign`](Self::campaign) waits to lead before [`Error::Timeout`] (zero:
    /// one try, [`Error::NotAcquired`] if someone leads). Default: without limit.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// A lock-delay for the leader's lease: if a leader's lease expires (rather than being
    /// resigned), nobody leads for `delay` after (see
    /// [`LockBuilder::lock_delay`](crate::LockBuilder::lock_delay)).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Waits (see [`wait`](Self::wait)) to lead, publishing `info` (at most 1 kB, e.g. the
    /// leader's address) to [`leader`](Self::leader): the [`Leadership`], whose watchdog keeps
    /// the lead until it is resigned or dropped.
    ///
    /// The wait holds no connection: it waits on the client's listener like a lock's, and is
    /// woken when the leader resigns or its lease runs out.
    pub async fn campaign(&self, info: impl Into<String>) -> Result<Leadership, Error> {
        self.campaign_with(Some(info.into())).await
    }

    /// [`campaign`](Self::campaign) publishing nothing ([`Leader::info`] is `None`).
    pub async fn campaign_without_info(&self) -> Result<Leadership, Error> {
        self.campaign_with(None).await
    }

    async fn campaign_with(&self, info: Option<String>) -> Result<Leadership, Error> {
        let kind = Kind::Leader { info };
        let builder = LockBuilder::of_kind(self.client.clone(), self.name.clone(), kind)
            .ttl(self.ttl)
            .lock_delay(self.lock_delay);
        let builder = match self.wait {
            Some(wait) => builder.wait(wait),
            None => builder.wait_forever(),
        };
        Ok(Leadership { guard: builder.acquire().await? })
    }

    /// The current leader, or `None` when nobody leads.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        args::election_name(&self.name)?;
        let statements = self.client.statements().await?;
        let connection = self.client.pool.get().await?;
        let values: [&(dyn ToSql + Sync); 1] = [&self.name];
        let rows =
            self.client.protocol().query(&connection, &statements.primitives.leader, &KEY, &values).await?;
        let Some(row) = rows.first() else { return Ok(None) };
        Ok(Some(Leader {
            info: row.try_get(0)?,
            term: row.try_get(1)?,
            since: row.try_get(2)?,
            expires_at: row.try_get(3)?,
        }))
    }
}

/// The lead of an election, kept by a watchdog while this lives. Dropping it resigns (in the
/// background, inside a tokio runtime).
#[derive(Debug)]
#[must_use = "dropping a leadership resigns at once"]
pub struct Leadership {
    guard: Guard,
}

impl Leadership {
    /// The election's name.
    pub fn election(&self) -> &str {
        self.guard.key()
    }

    /// The term: greater than every earlier leader's of this election. Pass it with every
    /// write made as leader, so a deposed leader's are refused (`dlock_holds(election, term)`).
    pub fn term(&self) -> i64 {
        self.guard.fence()
    }

    /// A token that fires when the lead is lost while still wanted (its lease was not renewed
    /// in time, or was force-released): stop acting as leader.
    pub fn lost(&self) -> CancellationToken {
        self.guard.lost()
    }

    /// Whether this process still leads as far as it knows (without asking the server).
    pub fn is_leading(&self) -> bool {
        self.guard.is_held()
    }

    /// When the lead ends unless renewed, as last known (server clock).
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.guard.expires_at()
    }

    /// Asks the server whether the lead's lease still carries this term (`dlock_holds`).
    pub async fn holds(&self) -> Result<bool, Error> {
        self.guard.holds().await
    }

    /// Renews the lead now: the new expiry, or [`Error::LockLost`] if it was lost.
    pub async fn renew(&self) -> Result<Option<SystemTime>, Error> {
        self.guard.renew().await
    }

    /// Gives up the lead now, so that the next candidate takes over at once: `true` if it was
    /// still ours.
    pub async fn resign(self) -> Result<bool, Error> {
        self.guard.release().await
    }
}
