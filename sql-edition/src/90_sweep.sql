-- Expiry without a background worker (extension/src/store/sweep.rs). A lease that is over
-- stops counting at once (every reader checks expires_at and the holder's session); its row
-- goes later:
--  * a grant overwrites or deletes the dead rows of its own key;
--  * a grant that added a row sweeps one random heap page of the table as it commits, and one
--    grant in eight that added none sweeps one too: the due rows settle at about one per page, so the table
--    stays at about what the live leases and the keys of the last sweep_after need, whatever
--    the churn of keys;
--  * dlock_sweep() sweeps the table (a pg_cron job, or the client, may call it), a bounded
--    number of rows a call, and notifies the watchers of keys whose leases it found expired.
-- A row is due when it has been over for longer than dlock.sweep_after (settings.sweep_after): free since then,
-- expired since then (and its lock-delay run out), or bound to a session that has ended. Rows
-- whose key lock (or sweep lock) is taken are skipped (the key is being changed).

-- dlock.sweep_after: the settings table's, or a superuser session's own SET dlock.sweep_after
-- (as dlock.max_ttl, 30_errors.sql; a bare number is seconds, as the native GUC's unit).
CREATE FUNCTION dlock_internal.sweep_after() RETURNS pg_catalog.interval
    LANGUAGE plpgsql STABLE
AS $$
DECLARE
    own pg_catalog.text := pg_catalog.current_setting('dlock.sweep_after', true);
BEGIN
    IF own IS NOT NULL AND own <> '' AND dlock_internal.caller_is_superuser() THEN
        RETURN CASE WHEN own ~ '^[0-9]+$' THEN pg_catalog.make_interval(secs => own::pg_catalog.float8)
                    ELSE own::pg_catalog.interval END;
    END IF;
    RETURN (SELECT s.sweep_after FROM dlock_internal.settings AS s);
END
$$;

-- Whether a row is due for deletion at p_at.
CREATE FUNCTION dlock_internal.is_due(p_l dlock_internal.lease, p_at pg_catalog.timestamptz, p_after pg_catalog.interval)
    RETURNS pg_catalog.bool LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN (p_l).hold_count = 0 OR (p_l).owner IS NULL THEN (p_l).expires_at + p_after < p_at
        WHEN (p_l).expires_at = 'infinity'::pg_catalog.timestamptz THEN NOT dlock_internal.bound_alive((p_l).key, (p_l).holder_pid)
        ELSE (p_l).expires_at + (p_l).lock_delay + p_after < p_at
    END
$$;

-- Takes the key's sweep lock, then its key lock, if nobody holds them; never waits. Both stay to
-- commit (an xact lock cannot be given back), the sweep lock even when the key lock was not
-- ours: a try of the key then waits for this commit too (short: the sweep runs as its
-- transaction commits), and answers as the key stands after it.
CREATE FUNCTION dlock_internal.lock_for_sweep(p_key pg_catalog.text) RETURNS pg_catalog.bool
    LANGUAGE sql
AS $$
    SELECT CASE WHEN pg_catalog.pg_try_advisory_xact_lock(dlock_internal.sweep_lock(p_key))
                THEN pg_catalog.pg_try_advisory_xact_lock(dlock_internal.key_lock(p_key))
                ELSE false END
$$;

-- Deletes the due rows among the rows from p_from up to p_to (ctids), and with p_notify frees
-- the leases that are over, each under its key lock (skipped when taken): how many rows it
-- changed, and how many it locked. At most p_max rows are locked: each
-- keeps its sweep and key locks (and a notify its watch lock) until the transaction ends, and
-- those take room in the server's shared lock table, which every session's locks share (a
-- sweep of 20,000 rows ran out of it with the default max_locks_per_transaction).
CREATE FUNCTION dlock_internal.sweep_rows(p_from pg_catalog.tid, p_to pg_catalog.tid, p_notify pg_catalog.bool,
                                          p_max pg_catalog.int4,
                                          OUT changed pg_catalog.int4, OUT locked pg_catalog.int4)
    LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz := pg_catalog.clock_timestamp();
    after pg_catalog.interval := dlock_internal.sweep_after();
    r dlock_internal.lease;
BEGIN
    changed := 0;
    locked := 0;
    -- A TID range scan; rows that cannot be over are filtered out before PL/pgSQL sees them.
    FOR r IN SELECT l.* FROM dlock_internal.lease AS l
              WHERE l.ctid >= p_from AND l.ctid < p_to
                AND (l.hold_count = 0 OR l.owner IS NULL OR l.expires_at = 'infinity' OR l.expires_at <= now_) LOOP
        EXIT WHEN locked OPERATOR(pg_catalog.>=) p_max;
        IF p_notify AND r.hold_count > 0 AND r.owner IS NOT NULL AND NOT dlock_internal.is_live(r, now_)
           AND (r.expires_at = 'infinity' OR r.expires_at + r.lock_delay <= now_) THEN
            -- dlock_sweep(): over (expired, lock-delay run out, or its session gone): free it and
            -- tell the key's watchers; the key row stays (free since then) for the key's next
            -- grant, unless it is due already (over for longer than sweep_after): then it goes.
            -- (A grant's page sweep leaves such a row as it is until it is due, as the native
            -- sweep does: nobody is told there, so there is nothing to mark.)
            locked := locked + 1;
            IF NOT dlock_internal.lock_for_sweep(r.key) THEN
                CONTINUE;
            END IF;
            IF r.holder = '' AND NOT dlock_internal.is_due(r, now_, after) THEN
                UPDATE dlock_internal.lease AS l
                   SET hold_count = 0, owner = NULL, role = NULL, holder_pid = NULL, info = NULL,
                       expires_at = CASE WHEN r.expires_at = 'infinity' THEN now_ ELSE r.expires_at + r.lock_delay END
                 WHERE l.key = r.key AND l.holder = '' AND l.fence = r.fence AND l.hold_count > 0;
            ELSE
                DELETE FROM dlock_internal.lease AS l
                 WHERE l.key = r.key AND l.holder = r.holder AND l.fence = r.fence;
            END IF;
            IF FOUND THEN
                changed := changed + 1;
                IF p_notify THEN
                    PERFORM dlock_internal.notify(r.key);
                END IF;
            END IF;
        ELSIF dlock_internal.is_due(r, now_, after) THEN
            locked := locked + 1;
            IF dlock_internal.lock_for_sweep(r.key) THEN
                DELETE FROM dlock_internal.lease AS l
                 WHERE l.key = r.key AND l.holder = r.holder AND dlock_internal.is_due(l, now_, after);
                IF FOUND THEN
                    changed := changed + 1;
                END IF;
            END IF;
        END IF;
    END LOOP;
END
$$;

-- One random page's rows, locking at most p_max: how many it locked.
CREATE FUNCTION dlock_internal.sweep_page(p_max pg_catalog.int4) RETURNS pg_catalog.int4
    LANGUAGE plpgsql
AS $$
DECLARE
    pages pg_catalog.int8 := pg_catalog.pg_relation_size('dlock_internal.lease'::pg_catalog.regclass)
                             / pg_catalog.current_setting('block_size')::pg_catalog.int8;
    page pg_catalog.int8;
BEGIN
    IF pages = 0 THEN
        RETURN 0;
    END IF;
    page := pg_catalog.floor(pg_catalog.random() * pages)::pg_catalog.int8;
    RETURN (SELECT s.locked FROM dlock_internal.sweep_rows(pg_catalog.format('(%s,0)', page)::pg_catalog.tid,
                                     pg_catalog.format('(%s,0)', page + 1)::pg_catalog.tid, false, p_max) AS s);
END
$$;

-- A grant's sweep runs as its transaction commits: a deferred constraint trigger on the rows
-- grants write. Swept rows' keys stay locked until the sweeping transaction ends, so a sweep
-- inside the grant's statement would, in a transaction block, keep those keys' acquirers
-- waiting (and a try answering busy) for as long as the block runs; at commit it holds them
-- for the commit alone, and a block that rolls back sweeps nothing. (SQL cannot tell a block
-- from an autocommit statement: with the extended protocol every driver uses, even an
-- autocommit statement starts after its transaction does.) Runs as the table's owner with its
-- own search_path: at commit no public function's SET is in force any more.
-- A transaction's sweeps lock at most 8 x max_locks_per_transaction rows (512 by default),
-- counted in dlock_sql.swept (local to the transaction): it fires once per row its grants
-- added, and each swept row keeps two locks to the commit, in the lock table every session
-- shares; unbounded, a transaction that took 2,000 new keys while many rows were due failed
-- at its COMMIT ("out of shared memory"). Rows past the budget wait for later grants' sweeps.
-- (A role that sets dlock_sql.swept itself only spares its own transactions' sweeps.)
CREATE FUNCTION dlock_internal.sweep_at_commit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seen pg_catalog.text := pg_catalog.current_setting('dlock_sql.swept', true);
    used pg_catalog.int4 := CASE WHEN seen ~ '^[0-9]{1,9}$' THEN seen::pg_catalog.int4 ELSE 0 END;
    budget pg_catalog.int4 := 8 * pg_catalog.current_setting('max_locks_per_transaction')::pg_catalog.int4;
BEGIN
    IF used < budget THEN
        used := used + dlock_internal.sweep_page(budget - used);
        PERFORM pg_catalog.set_config('dlock_sql.swept', used::pg_catalog.text, true);
    END IF;
    RETURN NULL;
END
$$;

-- Asks for a page sweep as this transaction commits, for a grant that wrote over the key row
-- (one in eight: the caller draws): writes the row's max_holders, NULL on every key row
-- already, the one column sweep_after_grant is on (no other statement names it). The caller
-- holds the key lock, and the row is there.
CREATE FUNCTION dlock_internal.sweep_later(p_key pg_catalog.text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE dlock_internal.lease AS l SET max_holders = NULL WHERE l.key = p_key AND l.holder = '';
END
$$;

-- The table, up to max_rows rows (locked: changed, or found changing): the number of rows it
-- deleted or freed. For a pg_cron job (SELECT cron.schedule('dlock-sweep', '* * * * *',
-- 'SELECT dlock_sweep()')) or the client; a backlog larger than max_rows takes more calls, each
-- its own transaction (a function cannot commit, and its locks stay until its caller's
-- commit). NULL, the default: as many as 16 x max_locks_per_transaction (1,024 by default), the
-- most it accepts: each row keeps up to three advisory locks, in the lock table every session
-- shares (max_locks_per_transaction x the server's connections: about 7,700 entries by default).
CREATE FUNCTION dlock_sweep(max_rows pg_catalog.int4 DEFAULT NULL) RETURNS pg_catalog.int4
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    most pg_catalog.int4 := 16 * pg_catalog.current_setting('max_locks_per_transaction')::pg_catalog.int4;
BEGIN
    IF max_rows < 1 OR max_rows > most THEN
        PERFORM dlock_internal.fail('22023', pg_catalog.format(
            'max_rows must be between 1 and %s (16 x max_locks_per_transaction), not %s', most, max_rows),
            'Each row a sweep changes keeps up to three advisory locks until its transaction ends, in the lock table every session shares: sweep a larger backlog in several calls, each its own transaction.');
    END IF;
    RETURN (SELECT s.changed FROM dlock_internal.sweep_rows('(0,0)'::pg_catalog.tid, '(4294967295,0)'::pg_catalog.tid,
                                                            true, COALESCE(max_rows, most)) AS s);
END
$$;
