"""Every statement the client sends, each calling into the extension's schema by name.

Unqualified calls would resolve through the caller's ``search_path``, where anyone who may
create objects in ``public`` can plant a ``public.dlock_acquire(...)`` that captures them. So
the client finds the schema the extension lives in once (:data:`FIND`) and writes it, quoted as
an identifier, into its statements; values always travel as ``$n`` parameters, each cast to its
type in the text (so that NULL and untyped values resolve, and nothing asks the server for
types). Whatever else the statements use is ``pg_catalog``'s, named so. The texts are those of
the Rust client (``clients/rust/src/statements``), each statement numbering only the parameters it uses.

Durations travel as seconds (``float8``) and become intervals on the server, so that NULL
(a session-bound ttl, an endless wait) passes through unchanged.
"""

from __future__ import annotations

#: The database's name, and the schema of its ``dlock`` extension (NULL if not installed).
FIND = (
    "SELECT pg_catalog.current_database()::pg_catalog.text, "
    "COALESCE((SELECT n.nspname::pg_catalog.text "
    "FROM pg_catalog.pg_extension e "
    "JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace "
    "WHERE e.extname OPERATOR(pg_catalog.=) 'dlock'::pg_catalog.name), "
    "(SELECT n.nspname::pg_catalog.text "
    "FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace "
    "JOIN pg_catalog.pg_namespace i ON i.nspowner OPERATOR(pg_catalog.=) p.proowner "
    "WHERE i.nspname OPERATOR(pg_catalog.=) 'dlock_internal'::pg_catalog.name "
    "AND p.proname OPERATOR(pg_catalog.=) 'dlock_acquire'::pg_catalog.name "
    "AND n.nspname OPERATOR(pg_catalog.<>) 'dlock_internal'::pg_catalog.name "
    "ORDER BY n.nspname LIMIT 1))"
)


def quote_identifier(name: str) -> str:
    """``name`` as an SQL identifier: always double-quoted, inner quotes doubled."""
    return '"' + name.replace('"', '""') + '"'


def _seconds(parameter: str) -> str:
    return f"pg_catalog.make_interval(secs => {parameter}::pg_catalog.float8)"


_CLOCKS = "pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp()"
_KEY, _OWNER, _TTL = "$1::pg_catalog.text", "$2::pg_catalog.text", _seconds("$3")
_NO_WAIT = "'0 seconds'::pg_catalog.interval"


class Statements:
    """The statements of one database, qualified with the schema its extension lives in.

    Unless said otherwise, the parameters are ``(key, owner, ttl seconds, ...)`` and the acquire
    statements answer ``(fence or NULL, server clock after the grant, statement start)``.
    """

    def __init__(self, schema: str) -> None:
        s = quote_identifier(schema)
        self.schema = schema
        # A try that finds a key busy says when to try again: seconds until the earliest expiry
        # of the key's live TTL leases (a release or a session's end notifies instead), or NULL.
        retry_after = (
            "(SELECT pg_catalog.date_part('epoch', pg_catalog.min(l.expires_at) "
            "OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) "
            f"FROM {s}.dlock_locks AS l "
            f"WHERE l.key OPERATOR(pg_catalog.=) {_KEY} AND pg_catalog.isfinite(l.expires_at))"
        )

        def trying(call: str) -> str:
            return f"SELECT t.f, {_CLOCKS}, CASE WHEN t.f IS NULL THEN {retry_after} END FROM {call} AS t(f)"

        #: (key, owner, ttl, wait): ``dlock_acquire`` waiting up to ``wait`` on the server.
        self.acquire = f"SELECT {s}.dlock_acquire({_KEY}, {_OWNER}, {_TTL}, {_seconds('$4')}), {_CLOCKS}"
        #: (key, owner, ttl, settle): one try that never queues, waiting at most ``settle`` for a
        #: transaction changing the key; then the seconds until the blocking lease expires.
        self.try_acquire = (
            f"SELECT t.fence, {_CLOCKS}, pg_catalog.date_part('epoch', t.retry_after) "
            f"FROM {s}.dlock_try_acquire({_KEY}, {_OWNER}, {_TTL}, {_seconds('$4')}) AS t"
        )
        def waiting(call: str) -> str:
            return f"SELECT {call}, {_CLOCKS}"

        def delayed(wait: str, delay: str) -> str:
            return f"{s}.dlock_acquire({_KEY}, {_OWNER}, {_TTL}, {wait}, {delay})"

        def shared(wait: str, permits: str, delay: str) -> str:
            return f"{s}.dlock_acquire_shared({_KEY}, {_OWNER}, {_TTL}, {wait}, {permits}::pg_catalog.int4, {delay})"

        def campaign(info: str, wait: str, delay: str) -> str:
            return f"{s}.dlock_campaign({_KEY}, {_OWNER}, {_TTL}, {info}::pg_catalog.text, {wait}, {delay})"

        #: (key, owner, ttl, wait, lock_delay): the exclusive acquire with a lock-delay.
        self.acquire_delayed = waiting(delayed(_seconds("$4"), _seconds("$5")))
        #: (key, owner, ttl, lock_delay): one try of it, then when to try again.
        self.try_delayed = trying(delayed(_NO_WAIT, _seconds("$4")))
        #: (key, owner, ttl, wait, max_holders, lock_delay): a shared lease (or a permit).
        self.acquire_shared = waiting(shared(_seconds("$4"), "$5", _seconds("$6")))
        #: (key, owner, ttl, max_holders, lock_delay): one try of it, then when to try again.
        self.try_shared = trying(shared(_NO_WAIT, "$4", _seconds("$5")))
        #: (election, candidate, ttl, info, wait, lock_delay): the lead of an election; the term.
        self.campaign = waiting(campaign("$4", _seconds("$5"), _seconds("$6")))
        #: (election, candidate, ttl, info, lock_delay): one try of it, then when to try again.
        self.try_campaign = trying(campaign("$4", _NO_WAIT, _seconds("$5")))
        #: (keys, owner, ttl, wait, lock_delay): every key or none; the fences in key order.
        self.acquire_all = (
            f"SELECT {s}.dlock_acquire_all($1::pg_catalog.text[], {_OWNER}, {_TTL}, "
            f"{_seconds('$4')}, {_seconds('$5')}), {_CLOCKS}"
        )
        #: (key, owner, ttl): the new expiry, or NULL if the lease is no longer ours
        #: ('infinity' for a session-bound lease).
        self.renew = f"SELECT {s}.dlock_renew({_KEY}, {_OWNER}, {_TTL})"
        #: (key, owner): whether the lease was still ours.
        self.release = f"SELECT {s}.dlock_release({_KEY}, {_OWNER})"
        #: (key, fence): whether a live lease of the key carries the fence.
        self.holds = f"SELECT {s}.dlock_holds({_KEY}, $2::pg_catalog.int8)"
        #: (keys in locking order, owner, ttl): the earliest new expiry, NULL unless all were ours.
        self.renew_all = (
            "SELECT CASE WHEN pg_catalog.count(e) OPERATOR(pg_catalog.=) pg_catalog.count(*) "
            "THEN pg_catalog.min(e) END "
            f"FROM pg_catalog.unnest($1::pg_catalog.text[]) AS k, LATERAL {s}.dlock_renew(k, {_OWNER}, {_TTL}) AS e"
        )
        #: (keys in locking order, owner): whether every lease was still ours.
        self.release_all = (
            "SELECT pg_catalog.bool_and(r) "
            f"FROM pg_catalog.unnest($1::pg_catalog.text[]) AS k, LATERAL {s}.dlock_release(k, {_OWNER}) AS r"
        )
        #: (keys, fences): whether every key's live lease still carries its fence.
        self.holds_all = (
            "SELECT pg_catalog.bool_and(h) "
            "FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.int8[])) "
            f"AS t(k, f), LATERAL {s}.dlock_holds(t.k, t.f) AS h"
        )
        #: (key): whether the key was held (dlock_admin members and superusers only).
        self.force_release = f"SELECT {s}.dlock_force_release({_KEY})"
        #: (election): info, term, since, expires_at (NULL when infinite); no row if nobody leads.
        self.leader = (
            "SELECT l.info, l.term, l.since, "
            "CASE WHEN pg_catalog.isfinite(l.expires_at) THEN l.expires_at END "
            f"FROM {s}.dlock_leader({_KEY}) AS l"
        )
        #: (key): whether the key is free now, and if not, when its earliest lease expires.
        self.is_free = f"SELECT {s}.dlock_wait_free({_KEY}, {_NO_WAIT}), {retry_after}"
        #: (key): LISTEN for the key's release on this session; the channel.
        self.watch = f"SELECT {s}.dlock_watch({_KEY})"
        #: (key): stop that.
        self.unwatch = f"SELECT {s}.dlock_unwatch({_KEY})"
        #: (): the live leases, ``expires_at`` NULL for session-bound ones.
        self.locks = (
            "SELECT key, owner, fence, hold_count::pg_catalog.int8, "
            "CASE WHEN pg_catalog.isfinite(expires_at) THEN expires_at END, "
            "holder_role::pg_catalog.text, waiters::pg_catalog.int8, mode "
            f"FROM {s}.dlock_locks ORDER BY key"
        )
