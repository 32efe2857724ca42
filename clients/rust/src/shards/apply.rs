//! An operator's change of the shard map on every server, in the order that keeps one holder
//! per key (docs/src/internals/shard-moves.md): the new map first on every server of the map it
//! replaces, which from then on grant and renew only their keys under it; then on the servers
//! new in it; then each gate on a server that gained keys is opened once the server the keys
//! came from holds none of them (its `dlock_shard_draining`), or, for a server declared gone,
//! by a timer of twice its longest lease. Every step is idempotent: an apply stopped anywhere
//! (a server down, a timeout) is resumed by running it again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use dlock_core::shards::ShardMap;
use tokio_postgres::Client as Connection;

use super::config::ShardsConfig;
use crate::client::Client;
use crate::error::Error;
use crate::statements::schema::{self, quote_identifier};

/// What an apply may do beyond the safe default.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Servers of the previous map that cannot be reached and will not come back with their
    /// leases: their keys move on a timer instead of a drain check.
    pub gone: BTreeSet<String>,
    /// The timer of a gone server's keys; default twice the longest `dlock.max_ttl` of the
    /// servers reached (a lease, then its lock-delay, each at most `max_ttl`).
    pub gone_delay: Option<Duration>,
    /// How long to wait for the gates to open; `None`: until they have.
    pub wait: Option<Duration>,
    /// Replace a map whose move is not complete on a server.
    pub force: bool,
}

/// One step of an apply, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The map was installed on a server.
    Installed {
        /// The server.
        server: String,
        /// False: it had the map already (a resumed apply).
        new: bool,
    },
    /// A server declared gone was left out.
    Skipped {
        /// The server.
        server: String,
    },
    /// A server still holds keys that moved to other servers.
    Draining {
        /// The server the keys move away from.
        from: String,
        /// How many of them it still holds (or holds back by a lock-delay).
        keys: i64,
    },
    /// A server may grant the keys it gained from another now.
    Opened {
        /// The server that gained them.
        into: String,
        /// The server they came from.
        from: String,
    },
    /// The keys a server gained from a gone server open on a timer.
    Timer {
        /// The server that gained them.
        into: String,
        /// The gone server.
        from: String,
        /// How long from now.
        after: Duration,
    },
}

/// How an apply ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Every server has the map and may grant every key it owns.
    Complete {
        /// The map's epoch.
        epoch: i64,
    },
    /// Installed everywhere, but gates are still closed when the wait ran out: run it again.
    Pending {
        /// The map's epoch.
        epoch: i64,
        /// What each closed gate waits for.
        waiting_for: Vec<String>,
    },
}

/// Why an apply stopped (run it again once the cause is gone: every step is idempotent).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// A server that must take part cannot be reached.
    #[error("server {server} cannot be reached ({source}){hint}")]
    Unreachable {
        /// The server.
        server: String,
        /// Why it must take part.
        hint: &'static str,
        /// The connection's error.
        #[source]
        source: Error,
    },
    /// The servers' maps do not say which map the new one replaces, or a server of it has no
    /// connection string.
    #[error("{0}")]
    Previous(String),
    /// A server refused a step (a map not newer than its own, a move still in progress, ...).
    #[error("server {server}: {source}")]
    Refused {
        /// The server.
        server: String,
        /// What it said.
        #[source]
        source: Error,
    },
}

/// A server's own view of the map (`dlock_shard_status`).
#[derive(Debug, Clone)]
struct Status {
    map: Option<ShardMap>,
    previous: Option<ShardMap>,
}

/// One connection to a server, with the schema of its dlock.
struct Server {
    conn: deadpool_postgres::Object,
    schema: String,
}

impl Server {
    async fn open(url: &str) -> Result<Server, Error> {
        let client = Client::builder(url).pool_size(1).build()?;
        let conn = client.pool().get().await?;
        let row = conn.query_one(schema::FIND, &[]).await?;
        let schema = quote_identifier(&schema::from_row(&row)?);
        Ok(Server { conn, schema })
    }

    fn db(&self) -> &Connection {
        &self.conn
    }

    async fn status(&self) -> Result<Status, Error> {
        let sql = format!(
            "SELECT epoch, servers, previous_epoch, previous_servers FROM {}.dlock_shard_status()",
            self.schema
        );
        let Some(row) = self.db().query_opt(&sql, &[]).await? else {
            return Ok(Status { map: None, previous: None });
        };
        let map = |epoch: Option<i64>, servers: Option<Vec<String>>| match (epoch, servers) {
            (Some(e), Some(s)) => ShardMap::new(e, s).ok(),
            _ => None,
        };
        Ok(Status { map: map(row.get(0), row.get(1)), previous: map(row.get(2), row.get(3)) })
    }

    async fn install(
        &self,
        me: &str,
        new: &ShardMap,
        previous: Option<&ShardMap>,
        force: bool,
    ) -> Result<bool, Error> {
        let sql = format!("SELECT {}.dlock_shard_install($1, $2, $3, $4, $5, $6)", self.schema);
        let (pe, ps) = (previous.map(ShardMap::epoch), previous.map(|p| p.servers().to_vec()));
        let row = self.db().query_one(&sql, &[&me, &new.epoch(), &new.servers(), &pe, &ps, &force]).await?;
        Ok(row.get(0))
    }

    /// `dlock.max_ttl`, in microseconds.
    async fn max_ttl(&self) -> Result<i64, Error> {
        let row = self
            .db()
            .query_one(
                "SELECT (pg_catalog.extract(epoch FROM pg_catalog.current_setting('dlock.max_ttl')::pg_catalog.interval) \
                   OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8",
                &[],
            )
            .await?;
        Ok(row.get(0))
    }

    /// The gates still closed (or on a timer that has not run out): (from, opens_at µs).
    async fn closed_gates(&self) -> Result<Vec<(String, bool)>, Error> {
        let sql = format!(
            "SELECT from_server, opens_at IS NOT NULL FROM {}.dlock_shard_gates() WHERE NOT open",
            self.schema
        );
        Ok(self.db().query(&sql, &[]).await?.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn draining(&self, epoch: i64) -> Result<i64, Error> {
        let sql = format!("SELECT {}.dlock_shard_draining($1)", self.schema);
        Ok(self.db().query_one(&sql, &[&epoch]).await?.get(0))
    }

    async fn drained(&self, from: &str, epoch: i64) -> Result<bool, Error> {
        let sql = format!("SELECT {}.dlock_shard_drained($1, $2)", self.schema);
        Ok(self.db().query_one(&sql, &[&from, &epoch]).await?.get(0))
    }

    async fn timer(&self, from: &str, epoch: i64, delay: Duration) -> Result<(), Error> {
        let sql =
            format!("SELECT {}.dlock_shard_timer($1, $2, pg_catalog.make_interval(secs => $3))", self.schema);
        self.db().query_one(&sql, &[&from, &epoch, &delay.as_secs_f64()]).await?;
        Ok(())
    }
}

/// Applies the map of `new` on every server, replacing the map of `previous` (which gives the
/// connection strings of servers `new` drops; without it, the servers' own record of the map
/// they replace, every one of whose servers `new` must then name). `progress` hears each step.
pub async fn apply(
    new: &ShardsConfig,
    previous: Option<&ShardsConfig>,
    options: &ApplyOptions,
    mut progress: impl FnMut(Progress),
) -> Result<Applied, ApplyError> {
    let target = new.map();
    let mut urls: BTreeMap<String, String> = BTreeMap::new();
    for config in previous.into_iter().chain([new]) {
        urls.extend(config.servers().map(|(n, u)| (n.to_owned(), u.to_owned())));
    }
    let mut servers: BTreeMap<String, Server> = BTreeMap::new();
    let mut unreachable: BTreeMap<String, Error> = BTreeMap::new();
    for (name, url) in &urls {
        match Server::open(url).await {
            Ok(server) => {
                servers.insert(name.clone(), server);
            }
            Err(e) => {
                unreachable.insert(name.clone(), e);
            }
        }
    }
    let replaced = match previous {
        Some(config) => Some(config.map().clone()),
        None => replaced_map(target, &servers).await?,
    };
    if let Some(old) = &replaced
        && let Some(missing) =
            old.servers().iter().find(|s| !urls.contains_key(*s) && !options.gone.contains(*s))
    {
        return Err(ApplyError::Previous(format!(
            "the map being replaced (epoch {}) names server {missing}, which has no connection string: give \
             the old map with --previous FILE, or declare it gone (--gone {missing})",
            old.epoch()
        )));
    }
    // The servers of the map being replaced first, then those new in this one.
    let first: Vec<String> = replaced.as_ref().map_or_else(Vec::new, |m| m.servers().to_vec());
    let then: Vec<String> = target.servers().iter().filter(|s| !first.contains(*s)).cloned().collect();
    let mut max_ttl: BTreeMap<String, i64> = BTreeMap::new();
    for name in first.iter().chain(&then) {
        let Some(server) = servers.get(name) else {
            if options.gone.contains(name) {
                progress(Progress::Skipped { server: name.clone() });
                continue;
            }
            let source =
                unreachable.remove(name).unwrap_or_else(|| Error::Config("no connection string".into()));
            let hint = if target.contains(name) {
                ": every server of the new map must have it before the move completes"
            } else {
                ": it must learn the new map before its keys can move (or declare it gone with --gone)"
            };
            return Err(ApplyError::Unreachable { server: name.clone(), hint, source });
        };
        let new = server
            .install(name, target, replaced.as_ref(), options.force)
            .await
            .map_err(|source| ApplyError::Refused { server: name.clone(), source })?;
        progress(Progress::Installed { server: name.clone(), new });
        if let Ok(us) = server.max_ttl().await {
            max_ttl.insert(name.clone(), us);
        }
    }
    open_gates(target, &servers, &max_ttl, options, &mut progress).await
}

/// The map `target` replaces, as the servers recorded it: the previous map of a server that has
/// `target` already (a resumed apply), else the newest older map any server has.
async fn replaced_map(
    target: &ShardMap,
    servers: &BTreeMap<String, Server>,
) -> Result<Option<ShardMap>, ApplyError> {
    let mut newest: Option<ShardMap> = None;
    for (name, server) in servers {
        let status =
            server.status().await.map_err(|source| ApplyError::Refused { server: name.clone(), source })?;
        match status.map {
            Some(map) if map.epoch() == target.epoch() => return Ok(status.previous),
            Some(map) if map.epoch() < target.epoch() => {
                newest = newest.into_iter().chain([map]).max_by_key(ShardMap::epoch);
            }
            Some(map) => {
                return Err(ApplyError::Previous(format!(
                    "server {name} has map epoch {}, newer than {}: write a map with a higher epoch",
                    map.epoch(),
                    target.epoch()
                )));
            }
            None => {}
        }
    }
    Ok(newest)
}

/// Opens every gate it can, and waits (up to `options.wait`) for the others.
async fn open_gates(
    target: &ShardMap,
    servers: &BTreeMap<String, Server>,
    max_ttl: &BTreeMap<String, i64>,
    options: &ApplyOptions,
    progress: &mut impl FnMut(Progress),
) -> Result<Applied, ApplyError> {
    let epoch = target.epoch();
    let started = Instant::now();
    let gone_delay = options.gone_delay.unwrap_or_else(|| {
        Duration::from_micros(2 * max_ttl.values().copied().max().unwrap_or(86_400_000_000).max(0) as u64)
    });
    let mut draining_reported: BTreeMap<String, i64> = BTreeMap::new();
    loop {
        let mut waiting_for = Vec::new();
        for into in target.servers() {
            let Some(server) = servers.get(into) else { continue };
            let refused = |source| ApplyError::Refused { server: into.clone(), source };
            for (from, timer_running) in server.closed_gates().await.map_err(refused)? {
                if timer_running {
                    waiting_for.push(format!("{into}: the timer of the keys from {from}"));
                    continue;
                }
                if let Some(old) = servers.get(&from) {
                    let keys = old
                        .draining(epoch)
                        .await
                        .map_err(|source| ApplyError::Refused { server: from.clone(), source })?;
                    if keys == 0 {
                        server.drained(&from, epoch).await.map_err(refused)?;
                        progress(Progress::Opened { into: into.clone(), from });
                    } else {
                        if draining_reported.insert(from.clone(), keys) != Some(keys) {
                            progress(Progress::Draining { from: from.clone(), keys });
                        }
                        waiting_for.push(format!("{into}: {keys} keys still held on {from}"));
                    }
                } else if options.gone.contains(&from) {
                    server.timer(&from, epoch, gone_delay).await.map_err(refused)?;
                    progress(Progress::Timer { into: into.clone(), from: from.clone(), after: gone_delay });
                    waiting_for.push(format!("{into}: the timer of the keys from {from}"));
                } else {
                    waiting_for.push(format!(
                        "{into}: {from} cannot be reached (declare it gone with --gone {from})"
                    ));
                }
            }
        }
        if waiting_for.is_empty() {
            return Ok(Applied::Complete { epoch });
        }
        if options.wait.is_some_and(|w| started.elapsed() >= w) {
            return Ok(Applied::Pending { epoch, waiting_for });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
