//! The statements of the contract's version 2: shared leases and semaphores, exclusive leases
//! with a lock-delay, elections, multi-key leases, and waiting for a key to be free.
//!
//! The single-key acquires share one parameter list ([`REQUEST`]), each statement using what it
//! needs: the types of all are given when it is prepared, so unused ones cost nothing.

use tokio_postgres::types::Type;

use super::seconds;

/// Key, owner, ttl, wait, lock-delay (seconds), max_holders, info: the parameters of every
/// single-key acquire of version 2.
pub(crate) const REQUEST: [Type; 7] =
    [Type::TEXT, Type::TEXT, Type::FLOAT8, Type::FLOAT8, Type::FLOAT8, Type::INT4, Type::TEXT];
/// Keys, owner, ttl, wait, lock-delay: `dlock_acquire_all`.
pub(crate) const KEYS_OWNER_TTL_WAIT_DELAY: [Type; 5] =
    [Type::TEXT_ARRAY, Type::TEXT, Type::FLOAT8, Type::FLOAT8, Type::FLOAT8];
/// Keys, owner, ttl.
pub(crate) const KEYS_OWNER_TTL: [Type; 3] = [Type::TEXT_ARRAY, Type::TEXT, Type::FLOAT8];
/// Keys, owner.
pub(crate) const KEYS_OWNER: [Type; 2] = [Type::TEXT_ARRAY, Type::TEXT];
/// Keys, fences.
pub(crate) const KEYS_FENCES: [Type; 2] = [Type::TEXT_ARRAY, Type::INT8_ARRAY];
/// Key, wait.
pub(crate) const KEY_WAIT: [Type; 2] = [Type::TEXT, Type::FLOAT8];

/// Version 2's statements, qualified with the extension's schema `s` (quoted).
#[derive(Debug)]
pub(crate) struct Primitives {
    /// `dlock_acquire_shared` waiting up to `$4`: fence or NULL, server clock, statement start.
    pub(crate) acquire_shared: String,
    /// `dlock_acquire_shared` without waiting, then when to try again (see [`Primitives::new`]).
    pub(crate) try_shared: String,
    /// The five-argument `dlock_acquire` (exclusive with a lock-delay), waiting up to `$4`.
    pub(crate) acquire_delayed: String,
    /// The same without waiting, then when to try again.
    pub(crate) try_delayed: String,
    /// `dlock_campaign` waiting up to `$4`: the term or NULL, and the two clock readings.
    pub(crate) campaign: String,
    /// The same without waiting, then when to try again.
    pub(crate) try_campaign: String,
    /// `dlock_leader`: info, term, since, expires_at (NULL when infinite); no row if nobody leads.
    pub(crate) leader: String,
    /// `dlock_acquire_all`: the fences (or NULL), server clock, statement start.
    pub(crate) acquire_all: String,
    /// `dlock_renew` of every key, in the order given (which must be the server's locking
    /// order, see `AllKeys`): the earliest new expiry, NULL unless every key was ours.
    pub(crate) renew_all: String,
    /// `dlock_release` of every key, in the order given (the server's locking order): whether
    /// every one was ours.
    pub(crate) release_all: String,
    /// `dlock_holds` of every key with its fence: whether every one still holds.
    pub(crate) holds_all: String,
    /// `dlock_wait_free` waiting up to `$2` on the server.
    pub(crate) wait_free: String,
    /// `dlock_wait_free` without waiting, then when to look again (as the tries).
    pub(crate) is_free: String,
}

impl Primitives {
    /// The statements for the schema `s`, already quoted.
    ///
    /// A try that finds the key busy says when to try again: seconds until the earliest expiry
    /// of the key's live TTL leases (a release or a session's end notifies instead), or NULL.
    /// It is read from `dlock_locks` only when the try was refused.
    pub(crate) fn new(s: &str) -> Primitives {
        let clocks = "pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp()";
        let (key, owner, ttl, wait, delay) =
            ("$1::pg_catalog.text", "$2::pg_catalog.text", seconds("$3"), seconds("$4"), seconds("$5"));
        let (permits, info) = ("$6::pg_catalog.int4", "$7::pg_catalog.text");
        let no_wait = "'0 seconds'::pg_catalog.interval";
        let retry_after = format!(
            "(SELECT pg_catalog.date_part('epoch', pg_catalog.min(l.expires_at) \
                       OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) \
                FROM {s}.dlock_locks AS l \
               WHERE l.key OPERATOR(pg_catalog.=) {key} AND pg_catalog.isfinite(l.expires_at))"
        );
        let waiting = |call: &str| format!("SELECT {call}, {clocks}");
        let trying = |call: &str| {
            format!("SELECT t.f, {clocks}, CASE WHEN t.f IS NULL THEN {retry_after} END FROM {call} AS t(f)")
        };
        let shared = |wait: &str| {
            format!("{s}.dlock_acquire_shared({key}, {owner}, {ttl}, {wait}, {permits}, {delay})")
        };
        let delayed = |wait: &str| format!("{s}.dlock_acquire({key}, {owner}, {ttl}, {wait}, {delay})");
        let campaign =
            |wait: &str| format!("{s}.dlock_campaign({key}, {owner}, {ttl}, {info}, {wait}, {delay})");
        let keys = "$1::pg_catalog.text[]";
        Primitives {
            acquire_shared: waiting(&shared(&wait)),
            try_shared: trying(&shared(no_wait)),
            acquire_delayed: waiting(&delayed(&wait)),
            try_delayed: trying(&delayed(no_wait)),
            campaign: waiting(&campaign(&wait)),
            try_campaign: trying(&campaign(no_wait)),
            leader: format!(
                "SELECT l.info, l.term, l.since, \
                        CASE WHEN pg_catalog.isfinite(l.expires_at) THEN l.expires_at END \
                   FROM {s}.dlock_leader({key}) AS l"
            ),
            acquire_all: waiting(&format!("{s}.dlock_acquire_all({keys}, {owner}, {ttl}, {wait}, {delay})")),
            renew_all: format!(
                "SELECT CASE WHEN pg_catalog.count(e) OPERATOR(pg_catalog.=) pg_catalog.count(*) \
                             THEN pg_catalog.min(e) END \
                   FROM pg_catalog.unnest({keys}) AS k, LATERAL {s}.dlock_renew(k, {owner}, {ttl}) AS e"
            ),
            release_all: format!(
                "SELECT pg_catalog.bool_and(r) \
                   FROM pg_catalog.unnest({keys}) AS k, LATERAL {s}.dlock_release(k, {owner}) AS r"
            ),
            holds_all: format!(
                "SELECT pg_catalog.bool_and(h) \
                   FROM ROWS FROM (pg_catalog.unnest({keys}), pg_catalog.unnest($2::pg_catalog.int8[])) \
                        AS t(k, f), \
                        LATERAL {s}.dlock_holds(t.k, t.f) AS h"
            ),
            wait_free: format!("SELECT {s}.dlock_wait_free({key}, {})", seconds("$2")),
            is_free: format!("SELECT {s}.dlock_wait_free({key}, {no_wait}), {retry_after}"),
        }
    }

    /// Every statement, for checks that apply to all.
    #[cfg(test)]
    pub(crate) fn all(&self) -> [&String; 13] {
        [
            &self.acquire_shared,
            &self.try_shared,
            &self.acquire_delayed,
            &self.try_delayed,
            &self.campaign,
            &self.try_campaign,
            &self.leader,
            &self.acquire_all,
            &self.renew_all,
            &self.release_all,
            &self.holds_all,
            &self.wait_free,
            &self.is_free,
        ]
    }
}
