//! Version 2 of the contract: read-write locks and semaphores (shared leases), multi-key locks
//! and elections. They run as their caller, and their statements pin their own `search_path`,
//! as every durable function's do (`durable.rs`).

use crate::api::convert::{micros, timestamptz};
use crate::ops;
use crate::pg::report::OrRaise;
use crate::pg::role;
use crate::settings;
use dlock_core::ArgError;
use dlock_core::args;
use dlock_core::lease::{Caller, Kind, Request};
use dlock_core::limits::MAX_KEYS_PER_CALL;
use pgrx::prelude::*;

/// Takes `key` shared for `owner`: beside any other shared holders, never beside an exclusive
/// lease; at most `max_holders` shared holders when given (a counting semaphore). Its fence, or
/// NULL when `wait` elapsed. Each shared holder's lease is a lease of its own (fence, ttl, renew,
/// release, reentry, expiry, session binding).
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_acquire_shared(
    key: Option<&str>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: default!(Option<Interval>, "'0 seconds'"),
    max_holders: default!(Option<i32>, "NULL"),
    lock_delay: default!(Option<Interval>, "'0 seconds'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    const F: &str = "dlock_acquire_shared";
    let key = args::key(key).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(micros(ttl), settings::max_ttl_us()).or_raise(F);
    let wait = args::wait(micros(wait)).or_raise(F);
    let max_holders = args::max_holders(max_holders).or_raise(F);
    let lock_delay = args::lock_delay(micros(lock_delay), settings::max_ttl_us()).or_raise(F);
    let caller = Caller { role: role::caller(fcinfo), owner, admin: false };
    let request = Request { kind: Kind::Shared, max_holders, ttl, lock_delay };
    ops::acquire::acquire(key, &caller, &request, None, wait).or_raise(F)
}

/// Takes every key of `keys` exclusively for `owner`, or none: the fences in the order of
/// `keys`, or NULL when not all could be had within `wait`. Never holds a subset, never
/// deadlocks, whatever order other callers list their keys in.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_acquire_all(
    keys: Option<Array<'_, &str>>,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: default!(Option<Interval>, "'0 seconds'"),
    lock_delay: default!(Option<Interval>, "'0 seconds'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<i64>> {
    const F: &str = "dlock_acquire_all";
    // Counted before anything is read out of it: an oversized array is refused as it is.
    if let Some(array) = &keys {
        let ndim = dimensions(fcinfo, 0);
        if ndim > 1 {
            Err::<(), _>(ArgError::Dimensions { arg: "keys", ndim }).or_raise(F);
        }
        if array.len() > MAX_KEYS_PER_CALL {
            Err::<(), _>(ArgError::TooMany { arg: "keys", len: array.len(), max: MAX_KEYS_PER_CALL })
                .or_raise(F);
        }
    }
    let keys: Option<Vec<Option<&str>>> = keys.as_ref().map(|array| array.iter().collect());
    let keys = args::keys(keys.as_deref()).or_raise(F);
    let owner = args::owner(owner).or_raise(F);
    let ttl = args::ttl(micros(ttl), settings::max_ttl_us()).or_raise(F);
    let wait = args::wait(micros(wait)).or_raise(F);
    let lock_delay = args::lock_delay(micros(lock_delay), settings::max_ttl_us()).or_raise(F);
    let caller = Caller { role: role::caller(fcinfo), owner, admin: false };
    let request = Request { lock_delay, ..Request::exclusive(ttl) };
    ops::acquire_all::acquire_all(&keys, &caller, &request, wait).or_raise(F)
}

/// The number of dimensions of array argument `n` (not NULL): pgrx's `Array` flattens them.
fn dimensions(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> i32 {
    // SAFETY: argument `n` of this call is a non-NULL array (pgrx already read it as one);
    // detoasting returns it as is or a palloc'd copy, freed with the call's memory context.
    unsafe {
        let datum = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n);
        let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        (*array).ndim
    }
}

/// Waits (up to `wait`; NULL: without limit) to lead `election` as `candidate`: the term (a
/// fence, so terms only grow), or NULL. The leader keeps the lead with `dlock_renew` and resigns
/// with `dlock_release`; `info` (at most 1 kB) is what `dlock_leader` shows of it.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_campaign(
    election: Option<&str>,
    candidate: Option<&str>,
    ttl: Option<Interval>,
    info: default!(Option<&str>, "NULL"),
    wait: default!(Option<Interval>, "NULL"),
    lock_delay: default!(Option<Interval>, "'0 seconds'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    const F: &str = "dlock_campaign";
    let election = args::text("election", election, dlock_core::limits::MAX_KEY_BYTES).or_raise(F);
    let candidate = args::text("candidate", candidate, dlock_core::limits::MAX_OWNER_BYTES).or_raise(F);
    let ttl = args::ttl(micros(ttl), settings::max_ttl_us()).or_raise(F);
    let info = args::info(info).or_raise(F);
    let wait = args::wait(micros(wait)).or_raise(F);
    let lock_delay = args::lock_delay(micros(lock_delay), settings::max_ttl_us()).or_raise(F);
    let caller = Caller { role: role::caller(fcinfo), owner: candidate, admin: false };
    let request = Request { kind: Kind::Leader, max_holders: None, ttl, lock_delay };
    ops::acquire::acquire(election, &caller, &request, info, wait).or_raise(F)
}

/// The current leader of `election`: its `info`, `term`, `since` and `expires_at`, or no row.
/// Any role that may use dlock may ask; the candidate string is never shown.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn dlock_leader(
    election: Option<&str>,
) -> TableIterator<
    'static,
    (
        name!(info, Option<String>),
        name!(term, i64),
        name!(since, TimestampWithTimeZone),
        name!(expires_at, TimestampWithTimeZone),
    ),
> {
    let election =
        args::text("election", election, dlock_core::limits::MAX_KEY_BYTES).or_raise("dlock_leader");
    let rows = crate::elections::leader::leader(election)
        .map(|l| (l.info, l.fence, timestamptz(l.acquired_at), timestamptz(l.expires_at)));
    TableIterator::new(rows)
}
