//! Fast mode's functions (preloaded only): leases in shared memory, no WAL (see `fast/`).

use crate::api::convert::{micros, timestamptz};
use crate::fast;
use crate::pg::report::OrRaise;
use crate::pg::role;
use crate::pg::spi::forbid_sql;
use dlock_core::args;
use pgrx::prelude::*;

// The fast-mode functions run no SQL and look nothing up by the caller's search_path; they
// touch only shared memory (and write a fence epoch's WAL record). So they need no pinned
// search_path, whose SET would cost them 5-25 % of their throughput (pgbench, 8 clients,
// uncontended pairs, interleaved rounds); each body runs inside `spi::forbid_sql`, which
// refuses any statement, so that this stays true as the code changes.

/// Fast mode (preloaded only; docs/src/guide/fast-mode.md): takes `key` for `owner` in shared memory,
/// with no WAL and no table: its fence, or NULL when another owner holds it and `wait` elapsed.
/// Takes effect at once, whatever becomes of the calling transaction. `ttl` is required and at
/// most `dlock.fast_max_ttl`; no fast key is granted for that long after the server starts.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_acquire(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: default!(Option<Interval>, "'0 seconds'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    crate::shards::forbid_fast().or_raise("dlock_fast_acquire");
    forbid_sql(|| {
        const F: &str = "dlock_fast_acquire";
        let key = args::fast_key(key).or_raise(F);
        let owner = args::fast_owner(owner).or_raise(F);
        let ttl = args::fast_ttl(micros(ttl), fast::max_ttl_us()).or_raise(F);
        let wait = args::wait(micros(wait)).or_raise(F);
        fast::acquire(&fast::Request { key, owner, role: role::caller(fcinfo), ttl }, wait).or_raise(F)
    })
}

/// Fast mode: extends the caller's live fast lease to now + `ttl`; the new expiry, or NULL when
/// the caller does not hold it.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_renew(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<TimestampWithTimeZone> {
    crate::shards::forbid_fast().or_raise("dlock_fast_renew");
    forbid_sql(|| {
        const F: &str = "dlock_fast_renew";
        let key = args::fast_key(key).or_raise(F);
        let owner = args::fast_owner(owner).or_raise(F);
        let ttl = args::fast_ttl(micros(ttl), fast::max_ttl_us()).or_raise(F);
        let role = role::caller(fcinfo);
        fast::renew(key, owner, role, role::is_admin(role), ttl).or_raise(F).map(timestamptz)
    })
}

/// Fast mode: gives back one hold of the caller's live fast lease; false when the caller does
/// not hold it.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_release(key: Option<&str>, owner: Option<&str>, fcinfo: pg_sys::FunctionCallInfo) -> bool {
    forbid_sql(|| {
        const F: &str = "dlock_fast_release";
        let key = args::fast_key(key).or_raise(F);
        let owner = args::fast_owner(owner).or_raise(F);
        let role = role::caller(fcinfo);
        // Only a foreign role needs the (catalog) admin check.
        fast::release(key, owner, role, false)
            .or_else(|e| if role::is_admin(role) { fast::release(key, owner, role, true) } else { Err(e) })
            .or_raise(F)
    })
}

/// Fast mode: whether the live fast lease on `key` carries `fence` (it is not transactional:
/// the answer may change the moment after).
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_holds(key: Option<&str>, fence: Option<i64>) -> bool {
    forbid_sql(|| {
        const F: &str = "dlock_fast_holds";
        let key = args::fast_key(key).or_raise(F);
        let fence = args::required("fence", fence).or_raise(F);
        fast::holds(key, fence).or_raise(F)
    })
}

/// Fast mode: the live fast leases of this database; owners of other roles' leases are NULL
/// (unless the caller is a dlock administrator).
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn dlock_fast_locks(
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<
    'static,
    (
        name!(key, String),
        name!(owner, Option<String>),
        name!(fence, i64),
        name!(hold_count, i32),
        name!(expires_at, TimestampWithTimeZone),
        name!(holder_role, pg_sys::Oid),
    ),
> {
    forbid_sql(|| {
        let viewer = role::caller(fcinfo);
        let sees_all = role::is_admin(viewer);
        let rows = fast::live()
            .or_raise("dlock_fast_locks")
            .into_iter()
            .map(|r| {
                let owner = (sees_all || r.role == viewer).then_some(r.owner);
                (r.key, owner, r.fence, r.hold_count, timestamptz(r.expires_at), pg_sys::Oid::from(r.role))
            })
            .collect::<Vec<_>>();
        TableIterator::new(rows)
    })
}
