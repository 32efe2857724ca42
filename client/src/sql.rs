//! Every statement the client sends: parameterised, prepared once per pooled connection.
//!
//! Durations travel as seconds (`float8`) and become intervals on the server, so that NULL
//! (session-bound ttl, endless wait) passes through unchanged.

/// `dlock_acquire`, then the server clock right after it and the statement's start (the
/// target list is evaluated in order): the grant's expiry and how long the server took to grant
/// are derived from them. Kept as light as the bare call: no function scan, no arithmetic.
pub const ACQUIRE: &str = "\
SELECT dlock_acquire($1::text, $2::text, $3::float8 * interval '1 second', $4::float8 * interval '1 second'), \
       pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp()";

/// `dlock_try_acquire`, with the same two clock readings, and how long until the blocking
/// lease expires (seconds, NULL when only a release frees it); `$4` is how long to wait for a
/// transaction changing the key, never in a queue.
pub const TRY_ACQUIRE: &str = "\
SELECT t.fence, pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp(), \
       extract(epoch FROM t.retry_after)::float8 \
  FROM dlock_try_acquire($1::text, $2::text, $3::float8 * interval '1 second', \
                         $4::float8 * interval '1 second') AS t";

/// `dlock_renew`: the new expiry, or NULL if the lease is no longer ours.
pub const RENEW: &str = "SELECT dlock_renew($1::text, $2::text, $3::float8 * interval '1 second')";

/// `dlock_release`: whether the lease was still ours.
pub const RELEASE: &str = "SELECT dlock_release($1::text, $2::text)";

/// `dlock_holds`: whether the live lease on the key carries this fence.
pub const HOLDS: &str = "SELECT dlock_holds($1::text, $2::bigint)";

/// `dlock_force_release`: whether the key was held (dlock_admin members and superusers only).
pub const FORCE_RELEASE: &str = "SELECT dlock_force_release($1::text)";

/// `dlock_fast_acquire` (fast mode, see [`LockBuilder::fast`](crate::LockBuilder::fast)), with
/// the same two clock readings as [`ACQUIRE`].
pub const FAST_ACQUIRE: &str = "\
SELECT dlock_fast_acquire($1::text, $2::text, $3::float8 * interval '1 second', $4::float8 * interval '1 second'), \
       pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp()";

/// `dlock_fast_renew`: the new expiry, or NULL if the fast lease is no longer ours.
pub const FAST_RENEW: &str = "SELECT dlock_fast_renew($1::text, $2::text, $3::float8 * interval '1 second')";

/// `dlock_fast_release`: whether the fast lease was still ours.
pub const FAST_RELEASE: &str = "SELECT dlock_fast_release($1::text, $2::text)";

/// `dlock_fast_holds`: whether the live fast lease on the key carries this fence.
pub const FAST_HOLDS: &str = "SELECT dlock_fast_holds($1::text, $2::bigint)";
