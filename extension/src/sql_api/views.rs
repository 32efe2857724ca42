//! The rows of the `dlock_locks` view (`sql/finalize.sql`): live leases, owners masked for
//! other roles.

use pgrx::prelude::*;

#[pg_schema]
mod dlock_internal {
    use crate::locks::liveness::is_live;
    use crate::locks::tags::Space;
    use crate::pg::backend::{database, now};
    use crate::pg::{role, spi};
    use crate::sql_api::convert::timestamptz;
    use crate::store;
    use dlock_core::key::key_hash;
    use pgrx::prelude::*;
    use std::collections::HashMap;

    /// The rows of the `dlock_locks` view: live leases, owners masked for other roles.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, dlock_internal, pg_temp)]
    #[allow(clippy::type_complexity)]
    fn locks(
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> TableIterator<
        'static,
        (
            name!(key, String),
            name!(owner, Option<String>),
            name!(fence, i64),
            name!(hold_count, i32),
            name!(acquired_at, TimestampWithTimeZone),
            name!(expires_at, TimestampWithTimeZone),
            name!(holder_pid, i32),
            name!(holder_role, pg_sys::Oid),
            name!(waiters, i32),
        ),
    > {
        let viewer = role::caller(fcinfo);
        let sees_all = role::is_admin(viewer);
        let rows = spi::connect(|spi| {
            let waiters: HashMap<u64, i32> =
                store::waiters(spi, database(), Space::Queue as u16).into_iter().collect();
            let now = now();
            store::all(spi)
                .into_iter()
                .filter(|(_, l)| is_live(l, now))
                .map(|(key, l)| {
                    let owner = (sees_all || l.role == viewer).then_some(l.owner);
                    let waiting = waiters.get(&key_hash(&key)).copied().unwrap_or(0);
                    (
                        key,
                        owner,
                        l.fence,
                        l.hold_count,
                        timestamptz(l.acquired_at),
                        timestamptz(l.expires_at),
                        l.holder_pid,
                        pg_sys::Oid::from(l.role),
                        waiting,
                    )
                })
                .collect::<Vec<_>>()
        });
        TableIterator::new(rows)
    }
}
