//! `dlock_stats` (a view over `dlock_internal.stats()`, one row per database) and
//! `dlock_stats_reset()`: what dlock did since the server started or the counts were reset
//! (preloaded only; see `stats/`).

use crate::api::convert::timestamptz;
use crate::fast;
use crate::pg::report::OrRaise;
use crate::pg::role;
use crate::stats::{self, COUNTERS, WAIT_BUCKETS_MS};
use dlock_core::DlockError;
use pgrx::prelude::*;

#[pg_schema]
mod dlock_internal {
    use super::*;

    /// Every count of every database that has any, one row per (database, counter): the
    /// counters of `stats::COUNTERS`, `wait_count` and `wait_sum_us`, the wait histogram as
    /// cumulative `wait_le_<ms>` counts (and `wait_le_inf`), and fast mode's `fast_leases` (the
    /// database's entries) and `fast_capacity`. Read by the `dlock_stats` view. Only the
    /// caller's own database unless it may see them all (`role::sees_all_databases`): other
    /// databases' names and activity are other tenants' business.
    #[pg_extern(volatile, parallel_safe)]
    fn stats(
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> TableIterator<
        'static,
        (
            name!(database, Option<pg_sys::Oid>),
            name!(since, TimestampWithTimeZone),
            name!(counter, String),
            name!(value, i64),
        ),
    > {
        let mut rows = Vec::new();
        let all = role::sees_all_databases(role::caller(fcinfo));
        let own = crate::pg::backend::database().to_u32();
        for db in stats::snapshot().into_iter().filter(|db| all || db.database == Some(own)) {
            let database = db.database.map(pg_sys::Oid::from);
            let since = timestamptz(db.since);
            let mut push = |name: String, value: i64| rows.push((database, since, name, value));
            for ((_, name), value) in COUNTERS.iter().zip(db.counters) {
                push(name.to_string(), value as i64);
            }
            let mut cumulative = 0;
            for (i, count) in db.buckets.iter().enumerate() {
                cumulative += *count as i64;
                let bound = WAIT_BUCKETS_MS.get(i).map_or("inf".to_string(), |ms| ms.to_string());
                push(format!("wait_le_{bound}"), cumulative);
            }
            push("wait_count".into(), cumulative);
            push("wait_sum_us".into(), db.wait_us as i64);
            if let Some((held, capacity)) = db.database.and_then(fast::fill) {
                push("fast_leases".into(), held);
                push("fast_capacity".into(), capacity);
            }
        }
        TableIterator::new(rows)
    }
}

/// Sets this database's dlock counts back to zero (`dlock_stats.since` is then now): for
/// members of dlock_admin and superusers (42501 otherwise).
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_stats_reset(fcinfo: pg_sys::FunctionCallInfo) {
    let caller = role::caller(fcinfo);
    if !role::is_admin(caller) {
        Err::<(), _>(DlockError::NotAdmin { function: "dlock_stats_reset" }).or_raise("dlock_stats_reset");
    }
    stats::reset();
}
