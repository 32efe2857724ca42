//! Every statement the client sends: parameterised, prepared once per pooled connection.
//!
//! Durations travel as seconds (`float8`) and become intervals on the server, so that NULL
//! (session-bound ttl, endless wait) passes through unchanged.

/// `dlock_acquire`, with the expiry it granted (server clock, NULL for a session-bound lease or
/// no grant) and how long the server took from receiving the statement to the grant, in seconds.
///
/// The function runs in FROM, before the target list, so both clock readings follow the grant.
pub const ACQUIRE: &str = "\
SELECT f, \
       CASE WHEN f IS NOT NULL THEN pg_catalog.clock_timestamp() + $3::float8 * interval '1 second' END, \
       extract(epoch FROM pg_catalog.clock_timestamp() - pg_catalog.statement_timestamp())::float8 \
  FROM dlock_acquire($1::text, $2::text, $3::float8 * interval '1 second', \
                     $4::float8 * interval '1 second') AS f";

/// `dlock_try_acquire`: like `ACQUIRE`, plus how long until the blocking lease expires (seconds,
/// NULL when only a release frees it); `$4` is how long to wait for a transaction changing the
/// key, never in a queue.
pub const TRY_ACQUIRE: &str = "\
SELECT t.fence, \
       CASE WHEN t.fence IS NOT NULL THEN pg_catalog.clock_timestamp() + $3::float8 * interval '1 second' END, \
       extract(epoch FROM pg_catalog.clock_timestamp() - pg_catalog.statement_timestamp())::float8, \
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
