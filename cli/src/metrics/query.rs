//! Reading everything a scrape shows in one statement: the `dlock_stats` rows (one per
//! database) with the `dlock_locks` gauges of the connected database beside each.

use std::time::Duration;

use dlock_client::{Client, Error};
use tokio_postgres::Row;

/// A counter of `dlock_stats`: its column, the metric it is served as, and the metric's help.
pub struct Counter {
    pub column: &'static str,
    pub metric: &'static str,
    pub help: &'static str,
}

const fn counter(column: &'static str, metric: &'static str, help: &'static str) -> Counter {
    Counter { column, metric, help }
}

/// Every counter of `dlock_stats`, served as `dlock_<metric>` (the names of
/// docs/deploy/prometheus/dlock-queries.yaml, so that dashboards and alert rules work with
/// either source).
pub const COUNTERS: [Counter; 23] = [
    counter("grants", "grants_total", "Leases granted (not reentries)"),
    counter("reentries", "reentries_total", "Reentrant acquires by a holder"),
    counter("releases", "releases_total", "Leases ended by their holder's release"),
    counter("force_releases", "force_releases_total", "Leases ended by dlock_force_release"),
    counter("expiries", "expiries_total", "Leases that ran out instead of being released"),
    counter(
        "expiries_while_connected",
        "expiries_while_connected_total",
        "Leases that ran out while their holder's session was connected (paused or hung holders)",
    ),
    counter("session_ends", "session_ends_total", "Session-bound leases ended by their session"),
    counter("waits_started", "waits_started_total", "Waits begun"),
    counter("waits_granted", "waits_granted_total", "Waits that ended with a grant"),
    counter("waits_timed_out", "wait_timeouts_total", "Waits whose wait ran out"),
    counter(
        "waits_cancelled",
        "waits_cancelled_total",
        "Waits ended by an error (cancel, statement_timeout, hang-up)",
    ),
    counter(
        "handoffs_direct",
        "handoffs_direct_total",
        "Keys handed to a waiter in the releaser's transaction",
    ),
    counter("handoffs_self", "handoffs_self_total", "Waiters that granted themselves"),
    counter("notifications", "notifications_total", "NOTIFYs sent to watchers"),
    counter("fast_grants", "fast_grants_total", "Fast-mode leases granted"),
    counter("fast_reentries", "fast_reentries_total", "Fast-mode reentrant acquires by a holder"),
    counter("fast_releases", "fast_releases_total", "Fast-mode leases released"),
    counter("fast_expiries", "fast_expiries_total", "Fast-mode leases that ran out"),
    counter("fast_waits_started", "fast_waits_started_total", "Fast-mode waits begun"),
    counter("fast_waits_granted", "fast_waits_granted_total", "Fast-mode waits that ended with a grant"),
    counter("fast_waits_timed_out", "fast_wait_timeouts_total", "Fast-mode waits whose wait ran out"),
    counter("fast_waits_cancelled", "fast_waits_cancelled_total", "Fast-mode waits ended by an error"),
    counter("fast_handoffs", "fast_handoffs_total", "Fast-mode keys handed to the first in line"),
];

/// What one scrape read.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// One per `dlock_stats` row (none without `shared_preload_libraries = 'dlock'`).
    pub databases: Vec<DatabaseStats>,
    /// The live leases of the connected database.
    pub leases: LeaseGauges,
}

/// One `dlock_stats` row.
#[derive(Debug, Clone, PartialEq)]
pub struct DatabaseStats {
    /// `None` for the counts shared by databases beyond the first 128.
    pub database: Option<String>,
    /// In the order of [`COUNTERS`]; `None` where the view has no value.
    pub counters: Vec<Option<i64>>,
    pub waits: WaitHistogram,
    /// Fast mode's table: this database's entries and the table's size (preloaded only).
    pub fast_table: Option<(i64, i64)>,
}

/// The wait-time histogram of one database, as the view has it.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitHistogram {
    /// Upper bounds in milliseconds, the last one infinite.
    pub le_ms: Vec<f64>,
    /// Cumulative counts, one per bound.
    pub cumulative: Vec<i64>,
    pub count: i64,
    pub sum_ms: f64,
}

/// The gauges of `dlock_locks`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseGauges {
    /// Live leases (one per holder).
    pub live: i64,
    /// Sessions waiting, summed over the holders' rows.
    pub waiters: i64,
    /// Age of the oldest live lease in seconds (0 with none).
    pub oldest_age_seconds: f64,
}

/// How long one scrape may take, connecting included: a database that does not answer by then
/// gets the scrape a 503 rather than leaving Prometheus to time out without a reason.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a scrape could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("cannot read dlock's statistics: {0}")]
    Database(#[from] Error),
    #[error("the database did not answer within {0:?}")]
    TimedOut(Duration),
    #[error("the statistics query answered no row")]
    NoRow,
}

impl From<tokio_postgres::Error> for ScrapeError {
    fn from(e: tokio_postgres::Error) -> Self {
        ScrapeError::Database(Error::from(e))
    }
}

/// Reads a snapshot through `client`: the extension's schema once per process (on the first
/// scrape that reaches the database), then one statement per scrape.
pub async fn read(client: &Client) -> Result<Snapshot, ScrapeError> {
    let read = async {
        let statement = statement(&client.extension_schema().await?);
        let connection = client.pool().get().await.map_err(Error::from)?;
        // Unnamed, nothing prepared: one round trip (parse, bind, execute together).
        snapshot(&connection.query_typed(&statement, &[]).await?)
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, read).await.unwrap_or(Err(ScrapeError::TimedOut(SCRAPE_TIMEOUT)))
}

/// The scrape's statement for an extension in `schema`: the lease gauges (one row) joined to
/// every `dlock_stats` row, so that a server without stats still answers one row. Only
/// constant column names and the quoted schema go into it; everything else is `pg_catalog`'s.
pub fn statement(schema: &str) -> String {
    let s = quote_identifier(schema);
    let counters: String = COUNTERS.iter().map(|c| format!("s.{}, ", c.column)).collect();
    format!(
        "SELECT l.live, l.waiters, l.oldest_age, s.database::pg_catalog.text, {counters}\
                s.wait_le_ms, s.wait_buckets, s.wait_count, s.wait_sum_ms::pg_catalog.float8, \
                s.fast_leases, s.fast_capacity, s.since IS NOT NULL \
           FROM (SELECT pg_catalog.count(*) AS live, \
                        COALESCE(pg_catalog.sum(waiters), 0)::pg_catalog.int8 AS waiters, \
                        COALESCE(pg_catalog.date_part('epoch', \
                            pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.min(acquired_at)), 0) AS oldest_age \
                   FROM {s}.dlock_locks) AS l \
           LEFT JOIN {s}.dlock_stats AS s ON true \
          ORDER BY s.database"
    )
}

/// `name` as an SQL identifier: double-quoted, inner double quotes doubled.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The snapshot in the answer to [`statement`].
fn snapshot(rows: &[Row]) -> Result<Snapshot, ScrapeError> {
    let first = rows.first().ok_or(ScrapeError::NoRow)?;
    let leases = LeaseGauges {
        live: first.try_get(0)?,
        waiters: first.try_get(1)?,
        oldest_age_seconds: first.try_get(2)?,
    };
    let mut databases = Vec::new();
    let after_counters = 4 + COUNTERS.len();
    for row in rows {
        // The LEFT JOIN's row when dlock_stats is empty (not preloaded).
        if !row.try_get::<_, bool>(after_counters + 6).unwrap_or(false) {
            continue;
        }
        let counters =
            (0..COUNTERS.len()).map(|i| row.try_get::<_, Option<i64>>(4 + i)).collect::<Result<_, _>>()?;
        let le_ms: Vec<f64> = row.try_get(after_counters)?;
        let cumulative: Vec<Option<i64>> = row.try_get(after_counters + 1)?;
        let waits = WaitHistogram {
            le_ms,
            cumulative: cumulative.into_iter().map(|c| c.unwrap_or(0)).collect(),
            count: row.try_get::<_, Option<i64>>(after_counters + 2)?.unwrap_or(0),
            sum_ms: row.try_get::<_, Option<f64>>(after_counters + 3)?.unwrap_or(0.0),
        };
        let fast_leases: Option<i64> = row.try_get(after_counters + 4)?;
        let fast_capacity: Option<i64> = row.try_get(after_counters + 5)?;
        databases.push(DatabaseStats {
            database: row.try_get(3)?,
            counters,
            waits,
            fast_table: fast_leases.zip(fast_capacity),
        });
    }
    Ok(Snapshot { databases, leases })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_reads_every_counter_from_the_quoted_schema() {
        let statement = statement("my \"stats\"");
        assert!(statement.contains("FROM \"my \"\"stats\"\"\".dlock_locks"));
        assert!(statement.contains("JOIN \"my \"\"stats\"\"\".dlock_stats"));
        for counter in &COUNTERS {
            assert!(statement.contains(&format!("s.{},", counter.column)), "{}", counter.column);
        }
    }

    #[test]
    fn counters_and_their_metrics_are_distinct_and_named_as_counters() {
        let mut metrics: Vec<_> = COUNTERS.iter().map(|c| c.metric).collect();
        metrics.sort_unstable();
        metrics.dedup();
        assert_eq!(metrics.len(), COUNTERS.len());
        assert!(COUNTERS.iter().all(|c| c.metric.ends_with("_total") && !c.help.is_empty()));
    }
}
