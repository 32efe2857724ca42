#!/usr/bin/env bash
# Waits in SQL: waiters queue first come first served in the lock manager; only the head
# polls, with a bounded backoff; every waiting session shows a wait event in
# pg_stat_activity; dlock_locks counts them; a cancelled wait leaves no trace; releases (and
# expiries found by dlock_sweep) NOTIFY the key's channel for dlock_watch-ers; a cycle of
# session-bound leases across sessions ends one of its waits with 40P01.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sqled_cluster waits
trap sqled_destroy EXIT

# Five waiters arrive 200 ms apart on a held key; each, once granted, holds it 100 ms.
q app_owner "CREATE TABLE granted (n int, fence bigint, at timestamptz DEFAULT clock_timestamp())" >/dev/null
q app_owner "SELECT dlock_acquire('w:k', 'holder', '1 minute')" >/dev/null
for n in 1 2 3 4 5; do
  psql -X -q -U app_owner -d app -c "SET application_name = 'waiter-$n'" \
    -c "INSERT INTO granted (n, fence) SELECT $n, dlock_acquire('w:k', 'w$n', '1 minute', '30 seconds')" \
    -c "SELECT pg_sleep(0.1)" -c "SELECT dlock_release('w:k', 'w$n')" >/dev/null &
  sleep 0.2
done
sleep 0.5
expect postgres "SELECT waiters FROM dlock_locks WHERE key = 'w:k'" 5
# Never a busy loop, never hidden: sampled 40 times, every waiter is in a wait event (the head
# may be caught between two looks now and then).
busy=0
for i in $(seq 1 40); do
  n=$(q postgres "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'waiter-%' AND wait_event IS NULL")
  busy=$((busy + n))
  sleep 0.025
done
[ "$busy" -le 4 ] || fail "waiters were seen on the CPU $busy times in 40 samples"
expect postgres "SELECT string_agg(DISTINCT wait_event_type || '/' || wait_event, ',' ORDER BY wait_event_type || '/' || wait_event)
  FROM pg_stat_activity WHERE application_name LIKE 'waiter-%'" "Lock/advisory,Timeout/PgSleep"
expect postgres "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'waiter-%' AND wait_event = 'advisory'" 4
t0=$(q postgres "SELECT clock_timestamp()")
q app_owner "SELECT dlock_release('w:k', 'holder')" >/dev/null
wait
# First come, first served: fences grow in arrival order; the first hand-off within the
# backoff's bound (settings.poll_max 10 ms, plus scheduling).
expect postgres "SELECT string_agg(n::text, ',' ORDER BY fence) FROM granted" "1,2,3,4,5"
expect postgres "SELECT (SELECT min(at) FROM granted) - '$t0'::timestamptz < interval '200 ms'" t
expect postgres "SELECT count(*) FROM dlock_locks" 0

# A wait ended by statement_timeout leaves the queue: the next waiter is not held up by it.
q app_owner "SELECT dlock_acquire('w:c', 'holder', '1 minute')" >/dev/null
expect_error app_owner "SET statement_timeout = '300ms'; SELECT dlock_acquire('w:c', 'x', '1 minute', NULL)" 57014
expect postgres "SELECT waiters FROM dlock_locks WHERE key = 'w:c'" 0
psql -X -q -At -U app_owner -d app -c "SELECT dlock_acquire('w:c', 'y', '1 minute', '10 seconds') IS NOT NULL" >"$SQLED_DIR/y.out" &
sleep 0.3
q app_owner "SELECT dlock_release('w:c', 'holder')" >/dev/null
wait
[ "$(cat "$SQLED_DIR/y.out")" = t ] || fail "the waiter after a cancelled one was not granted"

# An unbounded wait for a lease bound to this very session: 40P01 at once.
expect_error app_owner "SELECT dlock_acquire('w:s', 'a', NULL); SELECT dlock_acquire('w:s', 'b', '1 minute', NULL)" 40P01

# Watchers hear of a release at once, and of an expiry from dlock_sweep (no payload).
q app_owner "SELECT dlock_acquire('w:n', 'holder', '1 minute'), dlock_acquire('w:e', 'holder', '200 milliseconds')" >/dev/null
out=$(psql -X -U app_owner -d app 2>&1 <<SQL
SELECT dlock_watch('w:n') AS channel \gset
\\! psql -X -q -h "$PGHOST" -p "$PGPORT" -U app_owner -d app -c "SELECT dlock_release('w:n', 'holder')"
SELECT 'after release';
SELECT dlock_watch('w:e') AS channel_e \gset
SELECT pg_sleep(0.3);
\\! psql -X -q -h "$PGHOST" -p "$PGPORT" -U postgres -d app -c "SELECT dlock_sweep()"
SELECT 'after sweep';
SELECT dlock_unwatch('w:n'), dlock_unwatch('w:n');
SQL
)
grep -q 'Asynchronous notification "dlock_[0-9a-f]\{16\}" received' <<<"$out" || fail "no notification: $out"
[ "$(grep -c 'Asynchronous notification' <<<"$out")" = 2 ] || fail "want 2 notifications: $out"
grep -q ' t             | f' <<<"$out" || fail "unwatch: $out"
# A second watcher of a key holds the watch lock itself: once the first stops watching, a
# release still NOTIFYs it. (An earlier holds_advisory read pg_locks' own pid column for its
# parameter and so saw any backend's lock as this session's: the second watcher took none, and
# waits missed their wake-up once the first watcher left.)
q app_owner "SELECT dlock_acquire('w:two', 'holder', '1 minute')" >/dev/null
psql -X -q -U app_owner -d app -c "SELECT dlock_watch('w:two')" -c "SELECT pg_sleep(1)" >/dev/null &
first=$!
sleep 0.4
out=$(psql -X -U app_owner -d app 2>&1 <<SQL
SELECT dlock_watch('w:two') AS channel \gset
SELECT count(*) AS own_watch_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
\\! while psql -X -At -h "$PGHOST" -p "$PGPORT" -U postgres -d app -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(1)%' AND pid <> pg_backend_pid()" | grep -q '^[1-9]'; do sleep 0.1; done
\\! psql -X -q -h "$PGHOST" -p "$PGPORT" -U app_owner -d app -c "SELECT dlock_release('w:two', 'holder')"
SELECT 'after release';
SQL
)
wait "$first"
grep -A2 own_watch_locks <<<"$out" | grep -qx ' *1' || fail "the second watcher holds no watch lock of its own: $out"
grep -q 'Asynchronous notification "dlock_[0-9a-f]\{16\}" received' <<<"$out" ||
  fail "the second watcher heard nothing of the release once the first had left: $out"
# A watcher that releases the key itself hears of it too: its own watch lock cannot fail its
# own probe, so a session that has watched looks at its LISTEN list (notify, 40_locks.sql).
q app_owner "SELECT dlock_acquire('w:own', 'holder', '1 minute')" >/dev/null
out=$(psql -X -U app_owner -d app 2>&1 <<SQL
SELECT dlock_watch('w:own') AS channel \gset
SELECT dlock_release('w:own', 'holder');
SELECT 'after release';
SQL
)
grep -q 'Asynchronous notification "dlock_[0-9a-f]\{16\}" received' <<<"$out" ||
  fail "a watcher that released the key itself heard nothing: $out"

# A session-bound lease is live while its own session lives, not while another session holds
# a session-bound lease of the same key: two shared holders, the first terminated.
in_background app_owner bound-1 "SELECT dlock_acquire_shared('w:b', 'b1', NULL)"
# (one after the other: a try that meets the other's open change answers busy)
eventually postgres "SELECT count(*) FROM dlock_locks WHERE key = 'w:b'" 1
in_background app_owner bound-2 "SELECT dlock_acquire_shared('w:b', 'b2', NULL)"
eventually postgres "SELECT count(*) FROM dlock_locks WHERE key = 'w:b'" 2
end_sessions bound-1
expect postgres "SELECT string_agg(owner, ',') FROM dlock_locks WHERE key = 'w:b'" b2
end_sessions bound-2
# A release rolled back leaves the session-bound lease live for every session (its bound lock is
# a session-level lock, which a ROLLBACK does not take back); a committed release lets go of it
# by the session's next call. Seen from another session after each step.
out=$(psql -X -q -At -v ON_ERROR_STOP=1 -U app_owner -d app 2>&1 <<'SQL'
SELECT 'taken ' || (dlock_acquire('w:rb', 'rb', NULL) IS NOT NULL);
BEGIN;
SELECT 'released in the transaction ' || dlock_release('w:rb', 'rb');
ROLLBACK;
\! echo "after rollback: $(psql -X -q -At -U app_owner -d app -c "SELECT count(*) FROM dlock_locks WHERE key = 'w:rb'") live, another owner gets $(psql -X -q -At -U app_owner -d app -c "SELECT coalesce(dlock_acquire('w:rb', 'intruder', '1 minute')::text, 'NULL')")"
SELECT 'released ' || dlock_release('w:rb', 'rb');
SELECT 'next call ' || count(*) FROM dlock_locks WHERE key = 'w:rb';
SELECT 'advisory locks held ' || count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
\! echo "after release: another owner gets $(psql -X -q -At -U app_owner -d app -c "SELECT dlock_acquire('w:rb', 'intruder', '1 minute') IS NOT NULL")"
SQL
)
for want in "taken true" "released in the transaction true" "after rollback: 1 live, another owner gets NULL" \
            "released true" "next call 0" "advisory locks held 0" "after release: another owner gets t"; do
  grep -qxF "$want" <<<"$out" || fail "session-bound release rolled back, then committed: want '$want' in: $out"
done

# A cycle of three sessions' session-bound leases (a waits for b's key, b for c's, c for a's):
# exactly one of them ends with 40P01, about deadlock_timeout (1 s) after the cycle closed;
# its script then lets go of its lease, and the other two are granted in turn.
started=$(date +%s%N)
for n in 1 2 3; do
  next=$((n % 3 + 1))
  psql -X -q -At -U app_owner -d app -c "SELECT dlock_acquire('cy:$n', 'c$n', NULL) IS NOT NULL" \
    -c "SELECT pg_sleep(0.5)" -c "SELECT 'granted ' || dlock_acquire('cy:$next', 'c$n', NULL, '30 seconds')" \
    -c "SELECT 'released ' || dlock_release_all('c$n')" >"$SQLED_DIR/cycle-$n.log" 2>&1 &
done
wait
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
victims=$(cat "$SQLED_DIR"/cycle-*.log | grep -c "ERROR:  dlock: deadlock detected: this wait and the session-bound leases it waits for form a cycle" || true)
[ "$victims" = 1 ] || fail "a three-session cycle ended $victims waits with 40P01, want 1: $(cat "$SQLED_DIR"/cycle-*.log)"
[ "$(cat "$SQLED_DIR"/cycle-*.log | grep -c '^granted [0-9]')" = 2 ] || fail "the cycle's survivors were not both granted: $(cat "$SQLED_DIR"/cycle-*.log)"
[ "$elapsed_ms" -lt 10000 ] || fail "the three-session cycle took $elapsed_ms ms to end"
expect postgres "SELECT count(*) FROM dlock_locks WHERE key LIKE 'cy:%'" 0
# No cycle, no victim: a wait for a session-bound lease whose session does not wait (it sleeps
# in a statement of its own) runs to its limit, past several deadlock_timeouts, and answers NULL.
in_background app_owner idle-holder "SELECT dlock_acquire('cy:idle', 'holder', NULL)"
eventually postgres "SELECT count(*) FROM dlock_locks WHERE key = 'cy:idle'" 1
expect app_owner "SELECT coalesce(dlock_acquire('cy:idle', 'waiter', NULL, '2500 milliseconds')::text, 'NULL')" NULL
end_sessions idle-holder

echo "waits: all checks passed"
