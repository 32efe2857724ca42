//! Calls with several bad arguments at once, and calls the server cannot even resolve.

use tokio_postgres::error::SqlState;

use crate::callers::Caller;
use crate::entries::{Entry, Expect, entry, err, lit};
use crate::targets::Target;

/// Calls with several bad arguments at once, and calls the server cannot even resolve.
pub fn combinations(target: &Target) -> Vec<Entry> {
    use SqlState as S;
    let (k, o) = (lit(&target.key), lit(&target.owner));
    let both = || Expect::AnyError(vec![S::NULL_VALUE_NOT_ALLOWED, S::INVALID_PARAMETER_VALUE]);
    let on = |what: &str| format!("{what} on the {} key", target.name);
    vec![
        entry(
            on("acquire, all NULL"),
            Caller::User,
            "SELECT dlock_acquire(NULL, NULL, NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("acquire/3, all NULL"),
            Caller::User,
            "SELECT dlock_acquire(NULL, NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("renew, all NULL"),
            Caller::User,
            "SELECT dlock_renew(NULL, NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("release, all NULL"),
            Caller::User,
            "SELECT dlock_release(NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("holds, all NULL"),
            Caller::User,
            "SELECT dlock_holds(NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("acquire, typed NULLs"),
            Caller::User,
            "SELECT dlock_acquire(NULL::text, NULL::text, NULL::interval, NULL::interval)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("acquire, empty key and NULL owner"),
            Caller::User,
            "SELECT dlock_acquire('', NULL, '1 hour')::text",
            both(),
        ),
        entry(
            on("acquire, NULL key and empty owner"),
            Caller::User,
            "SELECT dlock_acquire(NULL, '', '1 hour')::text",
            both(),
        ),
        entry(
            on("acquire, empty key, owner, ttl 0, wait < 0"),
            Caller::User,
            "SELECT dlock_acquire('', '', '0', '-1 second')::text",
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, ttl 0 and wait < 0"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, '0', '-1 second')::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, ttl over max and wait < 0"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, '2 days', '-1 day')::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("renew, empty key and ttl NULL"),
            Caller::User,
            format!("SELECT dlock_renew('', {o}, NULL)::text"),
            both(),
        ),
        entry(
            on("renew, NULL owner and ttl 0"),
            Caller::User,
            format!("SELECT dlock_renew({k}, NULL, '0')::text"),
            both(),
        ),
        entry(
            on("holds, empty key and NULL fence"),
            Caller::User,
            "SELECT dlock_holds('', NULL)::text",
            both(),
        ),
        entry(
            on("acquire, named arguments, wait < 0"),
            Caller::User,
            format!(
                "SELECT dlock_acquire(key => {k}, owner => {o}, ttl => '1 hour', wait => '-1 second')::text"
            ),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, named arguments in another order, ttl < 0"),
            Caller::User,
            format!("SELECT dlock_acquire(wait => '0', ttl => '-1 hour', owner => {o}, key => {k})::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, an unknown named argument"),
            Caller::User,
            format!(
                "SELECT dlock_acquire(key => {k}, owner => {o}, ttl => '1 hour', timeout => '1 second')::text"
            ),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, two arguments"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o})::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, six arguments"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, '1 hour', '0', '0', '0')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, an integer owner"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, 42, '1 hour')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, an integer ttl"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, 3600)::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("release_all, no argument"),
            Caller::User,
            "SELECT dlock_release_all()::text",
            err(S::UNDEFINED_FUNCTION),
        ),
    ]
}
