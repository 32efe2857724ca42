//! Every statement the client sends, each calling into the extension's schema by name.
//!
//! Unqualified calls would resolve through the caller's `search_path`, where anyone who may
//! create objects in `public` can plant a `public.dlock_acquire(...)` that captures them. So the
//! client finds the schema the extension lives in once ([`schema`]) and writes it, quoted as an
//! identifier, into its statements; values always travel as `$n` parameters. Whatever else the
//! statements use is `pg_catalog`'s, named so.
//!
//! Durations travel as seconds (`float8`) and become intervals on the server, so that NULL
//! (session-bound ttl, endless wait) passes through unchanged.

pub(crate) mod call;
pub(crate) mod primitives;
pub(crate) mod rows;
pub(crate) mod schema;

use tokio_postgres::types::Type;

use primitives::Primitives;

/// The statements of one database, qualified with the schema the extension lives in there.
#[derive(Debug)]
pub(crate) struct Statements {
    /// The schema the extension lives in.
    pub(crate) schema: String,
    /// `dlock_acquire`, then the server clock right after it and the statement's start (the
    /// target list is evaluated in order): the grant's expiry and how long the server took to
    /// grant are derived from them. Kept as light as the bare call: no function scan.
    pub(crate) acquire: String,
    /// `dlock_try_acquire`, with the same two clock readings, and how long until the blocking
    /// lease expires (seconds, NULL when only a release frees it); `$4` is how long to wait for
    /// a transaction changing the key, never in a queue.
    pub(crate) try_acquire: String,
    /// `dlock_renew`: the new expiry, or NULL if the lease is no longer ours.
    pub(crate) renew: String,
    /// `dlock_renew` for callers without a guard: the expiry if finite (NULL for the
    /// `'infinity'` of a session-bound lease), and whether the lease was ours.
    pub(crate) renew_by_key: String,
    /// `dlock_release`: whether the lease was still ours.
    pub(crate) release: String,
    /// `dlock_holds`: whether the live lease on the key carries this fence.
    pub(crate) holds: String,
    /// `dlock_force_release`: whether the key was held (dlock_admin members and superusers only).
    pub(crate) force_release: String,
    /// `dlock_fast_acquire` (fast mode), with the same two clock readings as `acquire`.
    pub(crate) fast_acquire: String,
    /// `dlock_fast_renew`: the new expiry, or NULL if the fast lease is no longer ours.
    pub(crate) fast_renew: String,
    /// `dlock_fast_release`: whether the fast lease was still ours.
    pub(crate) fast_release: String,
    /// `dlock_fast_holds`: whether the live fast lease on the key carries this fence.
    pub(crate) fast_holds: String,
    /// `dlock_watch`: LISTEN for the key's release on this session; the channel.
    pub(crate) watch: String,
    /// `dlock_unwatch`: stop that.
    pub(crate) unwatch: String,
    /// The live leases of `dlock_locks`; `expires_at` NULL for session-bound ones.
    pub(crate) locks: String,
    /// Version 2: shared leases, lock-delays, elections, multi-key, waiting for a free key.
    pub(crate) primitives: Primitives,
}

/// `$n` parameters, their types given with the statement (so that no round trip asks the
/// server for them): key, owner, ttl, wait or settle.
pub(crate) const KEY_OWNER_TTL_WAIT: [Type; 4] = [Type::TEXT, Type::TEXT, Type::FLOAT8, Type::FLOAT8];
/// Key, owner, ttl.
pub(crate) const KEY_OWNER_TTL: [Type; 3] = [Type::TEXT, Type::TEXT, Type::FLOAT8];
/// Key, owner.
pub(crate) const KEY_OWNER: [Type; 2] = [Type::TEXT, Type::TEXT];
/// Key, fence.
pub(crate) const KEY_FENCE: [Type; 2] = [Type::TEXT, Type::INT8];
/// Key.
pub(crate) const KEY: [Type; 1] = [Type::TEXT];

/// Seconds (`float8`, NULL passing through) as an interval, in SQL.
fn seconds(parameter: &str) -> String {
    format!("pg_catalog.make_interval(secs => {parameter}::pg_catalog.float8)")
}

impl Statements {
    /// The statements for an extension installed in `schema`.
    pub(crate) fn new(schema: &str) -> Statements {
        let s = schema::quote_identifier(schema);
        let clocks = "pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp()";
        let (key, owner, ttl, wait) =
            ("$1::pg_catalog.text", "$2::pg_catalog.text", seconds("$3"), seconds("$4"));
        Statements {
            schema: schema.to_owned(),
            acquire: format!("SELECT {s}.dlock_acquire({key}, {owner}, {ttl}, {wait}), {clocks}"),
            try_acquire: format!(
                "SELECT t.fence, {clocks}, pg_catalog.date_part('epoch', t.retry_after) \
                   FROM {s}.dlock_try_acquire({key}, {owner}, {ttl}, {wait}) AS t"
            ),
            renew: format!("SELECT {s}.dlock_renew({key}, {owner}, {ttl})"),
            renew_by_key: format!(
                "SELECT CASE WHEN pg_catalog.isfinite(e) THEN e END, e IS NOT NULL \
                   FROM {s}.dlock_renew({key}, {owner}, {ttl}) AS e"
            ),
            release: format!("SELECT {s}.dlock_release({key}, {owner})"),
            holds: format!("SELECT {s}.dlock_holds({key}, $2::pg_catalog.int8)"),
            force_release: format!("SELECT {s}.dlock_force_release({key})"),
            fast_acquire: format!("SELECT {s}.dlock_fast_acquire({key}, {owner}, {ttl}, {wait}), {clocks}"),
            fast_renew: format!("SELECT {s}.dlock_fast_renew({key}, {owner}, {ttl})"),
            fast_release: format!("SELECT {s}.dlock_fast_release({key}, {owner})"),
            fast_holds: format!("SELECT {s}.dlock_fast_holds({key}, $2::pg_catalog.int8)"),
            watch: format!("SELECT {s}.dlock_watch({key})"),
            unwatch: format!("SELECT {s}.dlock_unwatch({key})"),
            locks: format!(
                "SELECT key, owner, fence, hold_count::pg_catalog.int8, \
                        CASE WHEN pg_catalog.isfinite(expires_at) THEN expires_at END, \
                        holder_role::pg_catalog.text, waiters::pg_catalog.int8 \
                   FROM {s}.dlock_locks ORDER BY key"
            ),
            primitives: Primitives::new(&s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_is_qualified_with_the_quoted_schema() {
        let statements = Statements::new("my \"locks\"");
        let all = [
            &statements.acquire,
            &statements.try_acquire,
            &statements.renew,
            &statements.renew_by_key,
            &statements.release,
            &statements.holds,
            &statements.force_release,
            &statements.fast_acquire,
            &statements.fast_renew,
            &statements.fast_release,
            &statements.fast_holds,
            &statements.watch,
            &statements.unwatch,
            &statements.locks,
        ];
        for statement in all.into_iter().chain(statements.primitives.all()) {
            let calls = statement.matches("dlock_").count();
            let qualified = statement.matches("\"my \"\"locks\"\"\".dlock_").count();
            assert!(calls >= 1 && calls == qualified, "{statement}");
        }
    }
}
