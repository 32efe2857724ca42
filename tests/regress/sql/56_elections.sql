-- Elections: dlock_campaign makes a candidate the leader of an election and returns its term
-- (a fence, so terms only grow); dlock_renew keeps the lead, dlock_release resigns, and
-- dlock_leader shows the leader's info, term, since and expires_at to anyone — never the
-- candidate string. info is at most 1 kB. Terms are compared, never printed.
\set SHOW_CONTEXT never
-- Not under test here: the once-per-session NOTICE of a first wait without preload.
SET client_min_messages = warning;
\pset null (null)

-- Nobody leads: no row.
SELECT count(*) AS leaders FROM dlock_leader('el:a');

-- A campaign on a free election wins at once; dlock_leader shows it, and only its columns.
SELECT clock_timestamp() AS t0 \gset
SELECT dlock_campaign('el:a', 'node-1', '1 minute', 'http://node-1:8080') AS t1 \gset
SELECT :t1 > 0 AS term_positive;
SELECT info, term = :t1 AS same_term, since >= :'t0'::timestamptz AS since_the_campaign,
       expires_at BETWEEN since + interval '1 minute' - interval '1 second'
                      AND since + interval '1 minute' AS expires_a_ttl_later
  FROM dlock_leader('el:a');
SELECT string_agg(name, ', ') AS leader_columns
  FROM unnest((SELECT proargnames FROM pg_proc WHERE proname = 'dlock_leader')) AS name;

-- Another candidate: no wait, or a short one, answers NULL; the leader stays.
SELECT dlock_campaign('el:a', 'node-2', '1 minute', 'http://node-2:8080', '0') IS NULL AS refused;
SELECT dlock_campaign('el:a', 'node-2', '1 minute', wait => '200 milliseconds') IS NULL AS timed_out;
SELECT info, term = :t1 AS same_term FROM dlock_leader('el:a');

-- The leader campaigning again is a reentry: the same term, one hold more; nothing else
-- changes, its info included.
SELECT dlock_campaign('el:a', 'node-1', '1 minute', 'changed?', '0') = :t1 AS same_term;
SELECT info FROM dlock_leader('el:a');
SELECT key, owner, mode, hold_count FROM dlock_locks;

-- dlock_holds is true for the live term; a lock of the election's name in another mode by
-- the leader is 0A000 (a lock is not an election), by others simply busy.
SELECT dlock_holds('el:a', :t1) AS term_holds, dlock_holds('el:a', :t1 + 1000) AS other_term;
SELECT dlock_acquire('el:a', 'node-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('el:a', 'node-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('el:a', 'node-2', '1 minute') IS NULL AS lock_refused,
       dlock_acquire_shared('el:a', 'node-2', '1 minute') IS NULL AS shared_refused;

-- Renew keeps the lead: expires_at moves, the term stays.
SELECT dlock_renew('el:a', 'node-1', '1 hour') AS renewed_until \gset
SELECT expires_at = :'renewed_until'::timestamptz AS leader_shows_it, term = :t1 AS same_term
  FROM dlock_leader('el:a');
SELECT dlock_renew('el:a', 'node-2', '1 hour') IS NULL AS other_candidate_renew;

-- Resigning takes both holds; then nobody leads, and the next leader's term is larger.
SELECT dlock_release('el:a', 'node-2') AS other_candidate_release;
SELECT dlock_release('el:a', 'node-1') AS first_hold;
SELECT count(*) AS leaders FROM dlock_leader('el:a');
SELECT dlock_release('el:a', 'node-1') AS resigned;
SELECT count(*) AS leaders FROM dlock_leader('el:a');
SELECT dlock_holds('el:a', :t1) AS old_term_holds;
SELECT dlock_campaign('el:a', 'node-2', '1 minute', 'http://node-2:8080') AS t2 \gset
SELECT :t2 > :t1 AS "t2 > t1";
SELECT info, term = :t2 AS same_term FROM dlock_leader('el:a');

-- A lead that expires ends by itself: no row, and the next term is larger again.
SELECT dlock_renew('el:a', 'node-2', '100 milliseconds') IS NOT NULL AS shortened;
SELECT pg_sleep(0.3);
SELECT count(*) AS leaders FROM dlock_leader('el:a');
SELECT dlock_renew('el:a', 'node-2', '1 minute') IS NULL AS renew_after_expiry;
SELECT dlock_campaign('el:a', 'node-2', '1 minute') AS t3 \gset
SELECT :t3 > :t2 AS "t3 > t2";
-- No info: NULL.
SELECT info, term = :t3 AS same_term FROM dlock_leader('el:a');
SELECT dlock_release('el:a', 'node-2') AS resigned;

-- A session-bound lead (ttl NULL) ends with the session; expires_at is infinity meanwhile.
SELECT dlock_campaign('el:s', 'node-1', NULL, 'bound') AS s1 \gset
SELECT info, expires_at FROM dlock_leader('el:s');
SELECT pg_backend_pid() AS old_pid \gset
\c
\set SHOW_CONTEXT never
\pset null (null)
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM dlock_leader('el:s'));
    PERFORM pg_sleep(0.01);
  END LOOP;
END
$$;
SELECT count(*) AS leaders_after_session_end FROM dlock_leader('el:s');
SELECT dlock_campaign('el:s', 'node-2', '1 minute') > :s1 AS next_term_larger;
SELECT dlock_release('el:s', 'node-2') AS resigned;

-- Elections are independent of each other.
SELECT dlock_campaign('el:x', 'node-1', '1 minute', 'x') IS NOT NULL AS leads_x,
       dlock_campaign('el:y', 'node-2', '1 minute', 'y') IS NOT NULL AS leads_y;
SELECT e, l.info FROM unnest(ARRAY['el:x', 'el:y', 'el:z']) AS e
  LEFT JOIN LATERAL dlock_leader(e) AS l ON true ORDER BY e;

-- Any role that may use dlock reads the leader, and no role sees the candidate there.
CREATE ROLE regress_observer;
SET ROLE regress_observer;
SELECT e, l.info FROM unnest(ARRAY['el:x', 'el:y']) AS e, LATERAL dlock_leader(e) AS l ORDER BY e;
-- Another role cannot resign for the leader (42501), even knowing the candidate string.
SELECT dlock_release('el:x', 'node-1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_observer;
SELECT dlock_release('el:x', 'node-1') AND dlock_release('el:y', 'node-2') AS resigned;

-- A rolled-back campaign never led.
BEGIN;
SELECT dlock_campaign('el:t', 'node-1', '1 minute', 'tx') IS NOT NULL AS led_in_tx;
SELECT info FROM dlock_leader('el:t');
ROLLBACK;
SELECT count(*) AS leaders_after_rollback FROM dlock_leader('el:t');

-- info: exactly 1024 bytes is valid; 1025 bytes (or 513 two-byte characters) is 22023.
SELECT dlock_campaign('el:i', 'node-1', '1 minute', repeat('i', 1024)) IS NOT NULL AS info_1024_bytes;
SELECT length(info) AS info_length FROM dlock_leader('el:i');
SELECT dlock_release('el:i', 'node-1') AS resigned;
SELECT dlock_campaign('el:i', 'node-1', '1 minute', repeat('i', 1025));
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('el:i', 'node-1', '1 minute', repeat('é', 513));
\echo :LAST_ERROR_SQLSTATE
-- NULL election or candidate: 22004; empty ones, a bad ttl or wait: 22023.
SELECT dlock_campaign(NULL, 'node-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('el:i', NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('', 'node-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('el:i', '', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('el:i', 'node-1', '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('el:i', 'node-1', '1 minute', wait => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_leader(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_leader('');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM dlock_locks;
