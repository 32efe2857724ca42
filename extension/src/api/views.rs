//! The rows of the `dlock_locks` view (`schema/finalize.sql`): one per live lease (a key held
//! shared has a row per holder), owners masked for other roles.

use pgrx::prelude::*;

#[pg_schema]
mod dlock_internal {
    use crate::api::convert::timestamptz;
    use crate::locks::liveness::is_live;
    use crate::locks::tags::Space;
    use crate::pg::backend::{database, now};
    use crate::pg::{role, spi};
    use crate::store;
    use dlock_core::key::key_hash;
    use dlock_core::lease::Lease;
    use pgrx::prelude::*;
    use std::collections::HashMap;

    /// (key, lease, waiters) of every live lease, in key order, as `viewer` may see them (owners
    /// of other roles' leases masked unless the viewer is an administrator). A key's waiters are
    /// the sessions in its queue, less this one: running this query, it waits for nothing, so a
    /// queue lock it holds is a grant of its open transaction (the head keeps its place until
    /// its transaction ends). Another session's such grant is not visible to us yet.
    fn live_leases(viewer: u32) -> Vec<(String, Lease, i32)> {
        let sees_all = role::is_admin(viewer);
        spi::connect(|spi| {
            let waiters: HashMap<u64, i32> =
                store::waiters(spi, database(), Space::Queue as u16).into_iter().collect();
            let now = now();
            store::all(spi)
                .into_iter()
                .filter(|(_, l)| is_live(l, now))
                .map(|(key, mut l)| {
                    if !sees_all && l.role != viewer {
                        l.owner.clear();
                    }
                    let waiting = waiters.get(&key_hash(&key)).copied().unwrap_or(0);
                    (key, l, waiting)
                })
                .collect()
        })
    }

    /// An owner as the viewer may see it (masked owners were cleared: an owner is never empty).
    fn shown(owner: String) -> Option<String> {
        (!owner.is_empty()).then_some(owner)
    }

    /// The rows of the `dlock_locks` view: every live lease, with its mode, a semaphore's
    /// permits and its lock-delay; owners masked for other roles.
    #[pg_extern(volatile, parallel_unsafe)]
    #[allow(clippy::type_complexity)]
    fn lock_rows(
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
            name!(mode, String),
            name!(max_holders, Option<i32>),
            name!(lock_delay, Interval),
        ),
    > {
        let rows = live_leases(role::caller(fcinfo)).into_iter().map(|(key, l, waiting)| {
            (
                key,
                shown(l.owner),
                l.fence,
                l.hold_count,
                timestamptz(l.acquired_at),
                timestamptz(l.expires_at),
                l.holder_pid,
                pg_sys::Oid::from(l.role),
                waiting,
                l.kind.mode().to_string(),
                l.max_holders,
                crate::store::interval(l.lock_delay),
            )
        });
        TableIterator::new(rows.collect::<Vec<_>>())
    }

    /// Release 0.1.0's view function (nine columns), for its SQL until `ALTER EXTENSION dlock
    /// UPDATE` replaces the view: no SQL of its own.
    #[pg_extern(volatile, parallel_unsafe, sql = false)]
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
        let rows = live_leases(role::caller(fcinfo)).into_iter().map(|(key, l, waiting)| {
            (
                key,
                shown(l.owner),
                l.fence,
                l.hold_count,
                timestamptz(l.acquired_at),
                timestamptz(l.expires_at),
                l.holder_pid,
                pg_sys::Oid::from(l.role),
                waiting,
            )
        });
        TableIterator::new(rows.collect::<Vec<_>>())
    }
}
