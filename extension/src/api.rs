//! The SQL functions of the contract: check arguments, run the operation, map errors. They run
//! as their caller, so that dlock sees the role PostgreSQL says is calling (`role.rs`), and
//! switch to the extension's owner only for their own statements on `dlock_internal`. The
//! durable ones pin a `search_path` of schemas no caller can create objects in (`pg_temp`
//! explicitly last), so nothing a caller creates in `public` or `pg_temp` can ever be picked up
//! in their place. The fast-mode functions run no SQL and pin none, and say why.

use crate::args;
use crate::error::{DlockError, OrRaise};
use crate::fast;
use crate::guc;
use crate::lease::{Caller, INFINITY};
use crate::ops;
use crate::role;
use crate::wait;
use crate::watch;
use pgrx::prelude::*;

fn interval_micros(i: Option<Interval>) -> Option<i128> {
    i.map(|i| i.as_micros())
}

fn timestamptz(t: i64) -> TimestampWithTimeZone {
    if t == INFINITY {
        TimestampWithTimeZone::positive_infinity()
    } else {
        // Every finite value we store came from the server clock plus a bounded ttl.
        TimestampWithTimeZone::try_from(t).unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
    }
}

/// Takes the lease `key` for `owner`: returns its fence token, or NULL when another owner holds
/// it and `wait` elapsed. `ttl NULL`: bound to this session. `wait NULL`: wait without limit.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_acquire(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: default!(Option<Interval>, "'0 seconds'"),
) -> Option<i64> {
    const F: &str = "dlock_acquire";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(interval_micros(ttl), guc::max_ttl_us()).or_raise(F);
    let wait = args::wait(interval_micros(wait)).or_raise(F);
    let caller = Caller { role: role::caller(), owner, admin: false };
    wait::acquire(key, &caller, ttl, wait)
}

/// One acquire attempt for callers that wait on a `dlock_watch` rather than in `dlock_acquire`:
/// never queues; waits up to `settle` (NULL: no limit) only for a transaction that is changing
/// the key. `fence` is the grant, or NULL; then `retry_after` is how long until the blocking
/// lease expires by itself, '0' if a transaction kept the key locked past `settle`, or NULL when
/// only a release, a force release or the holder's session ending frees it (and watchers get a
/// NOTIFY then).
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_try_acquire(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    settle: default!(Option<Interval>, "NULL"),
) -> TableIterator<'static, (name!(fence, Option<i64>), name!(retry_after, Option<Interval>))> {
    const F: &str = "dlock_try_acquire";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(interval_micros(ttl), guc::max_ttl_us()).or_raise(F);
    let settle = args::settle(interval_micros(settle)).or_raise(F);
    let caller = Caller { role: role::caller(), owner, admin: false };
    let deadline = settle.map(|s| crate::current::now().saturating_add(s));
    let row = match wait::try_once(key, &caller, ttl, deadline) {
        Ok(fence) => (Some(fence), None),
        Err(retry) => (None, retry.map(Interval::from_micros)),
    };
    TableIterator::once(row)
}

/// Registers this session to be told when `key` may have become free: it LISTENs on the key's
/// channel, which it returns (`dlock_` and 16 hex digits), and whoever frees the key (release,
/// release_all, force release, a shortening renew, a session-bound holder's session ending)
/// NOTIFYs that channel at commit. Idempotent; lasts until `dlock_unwatch` or session end.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_watch(key: Option<&str>) -> String {
    let key = args::key(key).or_raise("dlock_watch");
    let hash = crate::keylock::key_hash(key);
    watch::watch(hash);
    watch::channel(hash)
}

/// Ends this session's watch of `key` (and LISTEN on its channel); whether it had one.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_unwatch(key: Option<&str>) -> bool {
    let key = args::key(key).or_raise("dlock_unwatch");
    watch::unwatch(crate::keylock::key_hash(key))
}

/// Extends the caller's live lease to now + `ttl`; returns the new expiry ('infinity' for a
/// session-bound lease), or NULL when the caller does not hold it.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_renew(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
) -> Option<TimestampWithTimeZone> {
    const F: &str = "dlock_renew";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(interval_micros(ttl), guc::max_ttl_us())
        .or_raise(F)
        .unwrap_or_else(|| DlockError::Arg(args::ArgError::Null("ttl")).raise(F));
    ops::renew(key, owner, ttl).or_raise(F).map(timestamptz)
}

/// Gives back one hold of the caller's live lease; false when the caller does not hold it.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_release(key: Option<&str>, owner: Option<&str>) -> bool {
    const F: &str = "dlock_release";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    ops::release(key, owner).or_raise(F)
}

/// Frees every live lease of `owner` taken by the caller's role (any role's for dlock_admin);
/// returns how many keys were freed.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_release_all(owner: Option<&str>) -> i32 {
    let owner = args::owner(owner).or_raise("dlock_release_all");
    ops::release_all(owner)
}

// The fast-mode functions run no SQL and look nothing up by the caller's search_path; they
// touch only shared memory (and write a fence epoch's WAL record). So they need no pinned
// search_path, whose SET would cost them about 15 % of their throughput (measured with
// pgbench at 8 clients).

/// Fast mode (preloaded only; README "Fast mode"): takes `key` for `owner` in shared memory,
/// with no WAL and no table: its fence, or NULL when another owner holds it and `wait` elapsed.
/// Takes effect at once, whatever becomes of the calling transaction. `ttl` is required and at
/// most `dlock.fast_max_ttl`; no fast key is granted for that long after the server starts.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_acquire(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: default!(Option<Interval>, "'0 seconds'"),
) -> Option<i64> {
    const F: &str = "dlock_fast_acquire";
    let key = args::text("key", key, fast::MAX_KEY_BYTES).or_raise(F);
    let owner = args::text("owner", owner, fast::MAX_OWNER_BYTES).or_raise(F);
    let ttl = args::fast_ttl(interval_micros(ttl), fast::max_ttl_us()).or_raise(F);
    let wait = args::wait(interval_micros(wait)).or_raise(F);
    fast::acquire(&fast::Request { key, owner, role: role::caller(), ttl }, wait)
}

/// Fast mode: extends the caller's live fast lease to now + `ttl`; the new expiry, or NULL when
/// the caller does not hold it.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_renew(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
) -> Option<TimestampWithTimeZone> {
    const F: &str = "dlock_fast_renew";
    let key = args::text("key", key, fast::MAX_KEY_BYTES).or_raise(F);
    let owner = args::text("owner", owner, fast::MAX_OWNER_BYTES).or_raise(F);
    let ttl = args::fast_ttl(interval_micros(ttl), fast::max_ttl_us()).or_raise(F);
    let role = role::caller();
    fast::renew(key, owner, role, role::is_admin(role), ttl).or_raise(F).map(timestamptz)
}

/// Fast mode: gives back one hold of the caller's live fast lease; false when the caller does
/// not hold it.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_release(key: Option<&str>, owner: Option<&str>) -> bool {
    const F: &str = "dlock_fast_release";
    let key = args::text("key", key, fast::MAX_KEY_BYTES).or_raise(F);
    let owner = args::text("owner", owner, fast::MAX_OWNER_BYTES).or_raise(F);
    let role = role::caller();
    // Only a foreign role needs the (catalog) admin check.
    fast::release(key, owner, role, false)
        .or_else(|e| if role::is_admin(role) { fast::release(key, owner, role, true) } else { Err(e) })
        .or_raise(F)
}

/// Fast mode: whether the live fast lease on `key` carries `fence` (it is not transactional:
/// the answer may change the moment after).
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_fast_holds(key: Option<&str>, fence: Option<i64>) -> bool {
    const F: &str = "dlock_fast_holds";
    let key = args::text("key", key, fast::MAX_KEY_BYTES).or_raise(F);
    let fence = fence.ok_or(args::ArgError::Null("fence")).or_raise(F);
    fast::holds(key, fence)
}

/// Fast mode: the live fast leases of this database; owners of other roles' leases are NULL
/// (unless the caller is a dlock administrator).
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn dlock_fast_locks() -> TableIterator<
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
    let viewer = role::caller();
    let sees_all = role::is_admin(viewer);
    let rows = fast::live()
        .into_iter()
        .map(|r| {
            let owner = (sees_all || r.role == viewer).then_some(r.owner);
            (r.key, owner, r.fence, r.hold_count, timestamptz(r.expires_at), pg_sys::Oid::from(r.role))
        })
        .collect::<Vec<_>>();
    TableIterator::new(rows)
}

/// Whether a live lease on `key` carries `fence`; while true, the key cannot change hands
/// before the calling transaction ends (for fenced writes in the same database). Asking about
/// another role's live lease needs `dlock_fencer` (or `dlock_admin`): 42501 otherwise.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_holds(key: Option<&str>, fence: Option<i64>) -> bool {
    const F: &str = "dlock_holds";
    let key = args::key(key).or_raise(F);
    let fence = fence.unwrap_or_else(|| DlockError::Arg(args::ArgError::Null("fence")).raise(F));
    ops::holds(key, fence).or_raise(F)
}

/// Frees `key` whoever holds it (superusers and dlock_admin members only); logged.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, dlock_internal, pg_temp)]
fn dlock_force_release(key: Option<&str>) -> bool {
    const F: &str = "dlock_force_release";
    let key = args::key(key).or_raise(F);
    ops::force_release(key).or_raise(F)
}

#[pg_schema]
mod dlock_internal {
    use super::timestamptz;
    use crate::current::{is_live, now};
    use crate::keylock;
    use crate::role;
    use crate::spi;
    use crate::store;
    use pgrx::prelude::*;
    use std::collections::HashMap;

    /// The rows of the `dlock_locks` view: live leases, owners masked for other roles.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, dlock_internal, pg_temp)]
    #[allow(clippy::type_complexity)]
    fn locks() -> TableIterator<
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
        let viewer = role::caller();
        let sees_all = role::is_admin(viewer);
        let rows = spi::connect(|spi| {
            // SAFETY: set in every backend running SQL.
            let database = unsafe { pg_sys::MyDatabaseId };
            let waiters: HashMap<u64, i32> =
                store::waiters(spi, database, keylock::SPACE_QUEUE).into_iter().collect();
            let now = now();
            store::all(spi)
                .into_iter()
                .filter(|(_, l)| is_live(l, now))
                .map(|(key, l)| {
                    let owner = (sees_all || l.role == viewer).then_some(l.owner);
                    let waiting = waiters.get(&keylock::key_hash(&key)).copied().unwrap_or(0);
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
