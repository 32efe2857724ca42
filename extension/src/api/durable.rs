//! The durable leases' functions. They run as their caller, so that dlock sees the role
//! PostgreSQL says is calling (`pg/role.rs`), and switch to the extension's owner only for their
//! own statements on `dlock_internal`. They pin no `search_path` of their own: nothing in them
//! looks a name up but those statements, and every statement pins `pg_catalog, dlock_internal,
//! pg_temp` around itself wherever it runs (`pg/spi.rs`), at commit and in workers too, where a
//! function's SET clause would not reach. The lock cycle's hot path runs no statement at all
//! (`store/direct.rs`), so it does not pay for a SET clause's save and restore (a tenth of a
//! pair's instructions).

use crate::api::convert::{micros, timestamptz};
use crate::ops;
use crate::pg::report::OrRaise;
use crate::pg::role;
use crate::settings;
use dlock_core::args;
use dlock_core::lease::{Caller, Request};
use pgrx::prelude::*;

/// Takes the lease `key` for `owner`: returns its fence token, or NULL when another owner holds
/// it and `wait` elapsed. `ttl NULL`: bound to this session. `wait NULL`: wait without limit.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_acquire(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: default!(Option<Interval>, "'0 seconds'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    const F: &str = "dlock_acquire";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(micros(ttl), settings::max_ttl_us()).or_raise(F);
    let wait = args::wait(micros(wait)).or_raise(F);
    let caller = Caller { role: role::caller(fcinfo), owner, admin: false };
    ops::acquire::acquire(key, &caller, &Request::exclusive(ttl), None, wait).or_raise(F)
}

/// `dlock_acquire` with a lock-delay: should the lease end by expiring (not by release), the key
/// stays held back for `lock_delay` after its expiry, so that a paused holder's writes in flight
/// drain before the next holder starts. An overload without defaults (pass `wait` too), so that
/// every call of the four-argument `dlock_acquire` keeps resolving to it.
#[pg_extern(name = "dlock_acquire", volatile, parallel_unsafe)]
fn dlock_acquire_with_lock_delay(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: Option<Interval>,
    lock_delay: Option<Interval>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    const F: &str = "dlock_acquire";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(micros(ttl), settings::max_ttl_us()).or_raise(F);
    let wait = args::wait(micros(wait)).or_raise(F);
    let lock_delay = args::lock_delay(micros(lock_delay), settings::max_ttl_us()).or_raise(F);
    let caller = Caller { role: role::caller(fcinfo), owner, admin: false };
    let request = Request { lock_delay, ..Request::exclusive(ttl) };
    ops::acquire::acquire(key, &caller, &request, None, wait).or_raise(F)
}

/// One acquire attempt for callers that wait on a `dlock_watch` rather than in `dlock_acquire`:
/// never queues; waits up to `settle` (NULL: no limit) only for a transaction that is changing
/// the key. `fence` is the grant, or NULL; then `retry_after` is how long until the blocking
/// lease expires by itself, '0' if a transaction kept the key locked past `settle`, or NULL when
/// only a release, a force release or the holder's session ending frees it (and watchers get a
/// NOTIFY then).
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_try_acquire(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    settle: default!(Option<Interval>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<'static, (name!(fence, Option<i64>), name!(retry_after, Option<Interval>))> {
    const F: &str = "dlock_try_acquire";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(micros(ttl), settings::max_ttl_us()).or_raise(F);
    let settle = args::settle(micros(settle)).or_raise(F);
    let caller = Caller { role: role::caller(fcinfo), owner, admin: false };
    let deadline = settle.map(|s| crate::pg::backend::now().saturating_add(s));
    let row = match ops::acquire::try_once(key, &caller, ttl, deadline) {
        Ok(fence) => (Some(fence), None),
        Err(retry) => (None, retry.map(crate::store::interval)),
    };
    TableIterator::once(row)
}

/// Waits until no lease holds `key` (nor a lock-delay holds it back), without taking it: true
/// once it is free, false when `wait` (NULL: no limit) ran out first. Waiters do not queue one
/// behind another: one release wakes them all. On a key this session holds itself: 55006.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_wait_free(key: Option<&str>, wait: Option<Interval>) -> bool {
    const F: &str = "dlock_wait_free";
    let key = args::key(key).or_raise(F);
    let wait = args::wait(micros(wait)).or_raise(F);
    ops::wait_free::wait_free(key, wait).or_raise(F)
}

/// Registers this session to be told when `key` may have become free: it LISTENs on the key's
/// channel, which it returns (`dlock_` and 16 hex digits), and whoever frees the key (release,
/// release_all, force release, a shortening renew, a session-bound holder's session ending)
/// NOTIFYs that channel at commit. Idempotent; lasts until `dlock_unwatch` or session end.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_watch(key: Option<&str>) -> String {
    let key = args::key(key).or_raise("dlock_watch");
    ops::watch::watch(key)
}

/// Ends this session's watch of `key` (and LISTEN on its channel); whether it had one.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_unwatch(key: Option<&str>) -> bool {
    let key = args::key(key).or_raise("dlock_unwatch");
    ops::watch::unwatch(key)
}

/// Extends the caller's live lease to now + `ttl`; returns the new expiry ('infinity' for a
/// session-bound lease), or NULL when the caller does not hold it.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_renew(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<TimestampWithTimeZone> {
    const F: &str = "dlock_renew";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl =
        args::ttl(micros(ttl), settings::max_ttl_us()).and_then(|t| args::required("ttl", t)).or_raise(F);
    ops::renew::renew(key, owner, role::caller(fcinfo), ttl).or_raise(F).map(timestamptz)
}

/// Gives back one hold of the caller's live lease; false when the caller does not hold it.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_release(key: Option<&str>, owner: Option<&str>, fcinfo: pg_sys::FunctionCallInfo) -> bool {
    const F: &str = "dlock_release";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    ops::release::release(key, owner, role::caller(fcinfo)).or_raise(F)
}

/// Frees every live lease of `owner` taken by the caller's role (any role's for dlock_admin);
/// returns how many keys were freed.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_release_all(owner: Option<&str>, fcinfo: pg_sys::FunctionCallInfo) -> i32 {
    let owner = args::owner(owner).or_raise("dlock_release_all");
    ops::release::release_all(owner, role::caller(fcinfo))
}

/// Whether a live lease on `key` carries `fence`; while true, the key cannot change hands
/// before the calling transaction ends (for fenced writes in the same database). Asking about
/// another role's live lease needs `dlock_fencer` (or `dlock_admin`): 42501 otherwise.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_holds(key: Option<&str>, fence: Option<i64>, fcinfo: pg_sys::FunctionCallInfo) -> bool {
    const F: &str = "dlock_holds";
    let key = args::key(key).or_raise(F);
    let fence = args::required("fence", fence).or_raise(F);
    ops::fence::holds(key, fence, role::caller(fcinfo)).or_raise(F)
}

/// Frees `key` whoever holds it (superusers and dlock_admin members only); logged.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_force_release(key: Option<&str>, fcinfo: pg_sys::FunctionCallInfo) -> bool {
    const F: &str = "dlock_force_release";
    let key = args::key(key).or_raise(F);
    ops::release::force_release(key, role::caller(fcinfo)).or_raise(F)
}
