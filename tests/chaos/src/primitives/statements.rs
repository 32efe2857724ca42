//! The SQL the primitive workers send. Every statement reports the server's clock: the
//! statement's start (a lower bound of what it did) and `clock_timestamp()` after the call (an
//! upper bound). Times are epoch seconds, ttls and waits seconds.

/// `$1` key, `$2` owner, `$3` ttl, `$4` wait → fence, started, answered.
pub const ACQUIRE: &str = "SELECT dlock_acquire($1::text, $2::text, $3::float8 * interval '1 second', \
       $4::float8 * interval '1 second'), \
     extract(epoch FROM statement_timestamp())::float8, extract(epoch FROM clock_timestamp())::float8";

/// `$1` key, `$2` owner, `$3` ttl, `$4` wait, `$5` max_holders (NULL: no semaphore).
pub const ACQUIRE_SHARED: &str = "SELECT dlock_acquire_shared($1::text, $2::text, \
       $3::float8 * interval '1 second', $4::float8 * interval '1 second', $5::int4), \
     extract(epoch FROM statement_timestamp())::float8, extract(epoch FROM clock_timestamp())::float8";

/// `$1` keys, `$2` owner, `$3` ttl, `$4` wait → fences, started, answered.
pub const ACQUIRE_ALL: &str = "SELECT dlock_acquire_all($1::text[], $2::text, \
       $3::float8 * interval '1 second', $4::float8 * interval '1 second'), \
     extract(epoch FROM statement_timestamp())::float8, extract(epoch FROM clock_timestamp())::float8";

/// `$1` election, `$2` candidate, `$3` ttl, `$4` info, `$5` wait → term, started, answered.
pub const CAMPAIGN: &str = "SELECT dlock_campaign($1::text, $2::text, $3::float8 * interval '1 second', \
       $4::text, $5::float8 * interval '1 second'), \
     extract(epoch FROM statement_timestamp())::float8, extract(epoch FROM clock_timestamp())::float8";

/// `$1` election → term, info, expires_at (all NULL: nobody leads), asked, answered.
pub const LEADER: &str = "SELECT l.term, l.info, extract(epoch FROM l.expires_at)::float8, \
       extract(epoch FROM statement_timestamp())::float8, extract(epoch FROM clock_timestamp())::float8 \
     FROM (VALUES (1)) AS one LEFT JOIN dlock_leader($1::text) AS l ON true";

/// `$1` keys, `$2` fences → per key in order: live?, its expiry (NULL: not in `dlock_locks`),
/// and the server time after it was judged.
pub const CHECK: &str = "SELECT dlock_holds(t.k, t.f), \
       (SELECT extract(epoch FROM l.expires_at)::float8 FROM dlock_locks l WHERE l.key = t.k AND l.fence = t.f), \
       extract(epoch FROM clock_timestamp())::float8 \
     FROM unnest($1::text[], $2::int8[]) WITH ORDINALITY AS t(k, f, i) ORDER BY t.i";

/// `$1` keys, `$2` owner, `$3` ttl → per key in order: the new expiry (NULL: not held), and the
/// server time after it was judged.
pub const RENEW: &str = "SELECT extract(epoch FROM dlock_renew(t.k, $2::text, $3::float8 * interval '1 second'))::float8, \
       extract(epoch FROM clock_timestamp())::float8 \
     FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i) ORDER BY t.i";

/// `$1` keys, `$2` owner → per key in order: released?, the statement's start, the time after.
/// One statement: one transaction lets every key go at once.
pub const RELEASE: &str = "SELECT dlock_release(t.k, $2::text), \
       extract(epoch FROM statement_timestamp())::float8, extract(epoch FROM clock_timestamp())::float8 \
     FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i) ORDER BY t.i";

/// `$1` owner → the keys it holds (sorted), and the server time after.
pub const HELD_BY: &str = "SELECT coalesce(array_agg(key ORDER BY key), '{}'::text[]), \
       extract(epoch FROM clock_timestamp())::float8 \
     FROM dlock_locks WHERE owner = $1::text";

/// `$1` key, `$2` wait → free?, the statement's start, the time after.
pub const WAIT_FREE: &str = "SELECT dlock_wait_free($1::text, $2::float8 * interval '1 second'), \
     extract(epoch FROM statement_timestamp())::float8, extract(epoch FROM clock_timestamp())::float8";
