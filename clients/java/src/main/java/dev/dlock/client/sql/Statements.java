package dev.dlock.client.sql;

/**
 * Every statement the client sends, each calling into the extension's schema by name.
 *
 * <p>Unqualified calls would resolve through the caller's {@code search_path}, where anyone who
 * may create objects in {@code public} can plant a {@code public.dlock_acquire(...)} that captures
 * them. So the client finds the schema the extension lives in once ({@link #FIND}) and writes it,
 * quoted as an identifier, into its statements; values always travel as parameters. Whatever else
 * the statements use is {@code pg_catalog}'s, named so. The texts are those of the Rust client
 * ({@code clients/rust/src/statements}) and of the Python and TypeScript clients.
 *
 * <p>Durations travel as seconds ({@code float8}) and become intervals on the server, so that
 * NULL (a session-bound ttl, an endless wait) passes through unchanged. The acquire statements
 * answer {@code (fence or NULL, server clock after the grant, statement start)} (epoch seconds), and the tries a
 * fourth column: seconds until the blocking lease expires by itself (NULL when only a release or
 * its holder's session ending frees the key).
 */
public final class Statements {
    /** The database's name, and the schema of its {@code dlock} extension (NULL if not installed). */
    public static final SqlText FIND = SqlText.of(
            "SELECT pg_catalog.current_database()::pg_catalog.text, "
                    + "COALESCE((SELECT n.nspname::pg_catalog.text "
                    + "FROM pg_catalog.pg_extension e "
                    + "JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace "
                    + "WHERE e.extname OPERATOR(pg_catalog.=) 'dlock'::pg_catalog.name), "
                    + "(SELECT n.nspname::pg_catalog.text "
                    + "FROM pg_catalog.pg_proc p "
                    + "JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace "
                    + "JOIN pg_catalog.pg_namespace i ON i.nspowner OPERATOR(pg_catalog.=) p.proowner "
                    + "WHERE i.nspname OPERATOR(pg_catalog.=) 'dlock_internal'::pg_catalog.name "
                    + "AND p.proname OPERATOR(pg_catalog.=) 'dlock_acquire'::pg_catalog.name "
                    + "AND n.nspname OPERATOR(pg_catalog.<>) 'dlock_internal'::pg_catalog.name "
                    + "ORDER BY n.nspname LIMIT 1))");

    /** The server's clock just after the grant and the statement's start, as epoch seconds: the
     *  grant's expiry and how long the server took are derived from them (doubles are cheaper to
     *  read than timestamps, and the target list is evaluated in order). */
    private static final String CLOCKS = "pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()), "
            + "pg_catalog.date_part('epoch', pg_catalog.statement_timestamp())";
    private static final String KEY = "$1::pg_catalog.text";
    private static final String OWNER = "$2::pg_catalog.text";
    private static final String TTL = seconds("$3");
    private static final String NO_WAIT = "'0 seconds'::pg_catalog.interval";

    /** The schema the extension lives in. */
    public final String schema;
    /** (key, owner, ttl, wait): {@code dlock_acquire}, waiting up to {@code wait} on the server. */
    public final SqlText acquire;
    /** (key, owner, ttl, settle): one try that never queues, then when to try again. */
    public final SqlText tryAcquire;
    /** (key, owner, ttl, wait, lock_delay): the exclusive acquire with a lock-delay. */
    public final SqlText acquireDelayed;
    /** (key, owner, ttl, lock_delay): one try of it, then when to try again. */
    public final SqlText tryDelayed;
    /** (key, owner, ttl, wait, max_holders, lock_delay): a shared lease (or a semaphore's permit). */
    public final SqlText acquireShared;
    /** (key, owner, ttl, max_holders, lock_delay): one try of it, then when to try again. */
    public final SqlText tryShared;
    /** (election, candidate, ttl, info, wait, lock_delay): the lead of an election; the term. */
    public final SqlText campaign;
    /** (election, candidate, ttl, info, lock_delay): one try of it, then when to try again. */
    public final SqlText tryCampaign;
    /** (keys, owner, ttl, wait, lock_delay): every key or none; the fences in key order. */
    public final SqlText acquireAll;
    /** (key, owner, ttl): the new expiry, NULL if no longer ours ('infinity' if session-bound). */
    public final SqlText renew;
    /** (key, owner): whether the lease was still ours. */
    public final SqlText release;
    /** (key, fence): whether a live lease of the key carries the fence. */
    public final SqlText holds;
    /** (keys, fences): whether every key's live lease still carries its fence. */
    public final SqlText holdsAll;
    /** (key): whether the key was held ({@code dlock_admin} members and superusers only). */
    public final SqlText forceRelease;
    /** (election): info, term, since, expires_at (NULL when infinite); no row if nobody leads. */
    public final SqlText leader;
    /** (key): whether the key is free now, and if not, when its earliest lease expires. */
    public final SqlText isFree;
    /** (key): LISTEN for the key's release on this session; the channel. */
    public final SqlText watch;
    /** (key): stop that. */
    public final SqlText unwatch;

    /**
     * The statements of one database.
     *
     * @param schema the schema its {@code dlock} extension lives in
     */
    public Statements(String schema) {
        this.schema = schema;
        String s = quoteIdentifier(schema);
        String retryAfter = "(SELECT pg_catalog.date_part('epoch', pg_catalog.min(l.expires_at) "
                + "OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) "
                + "FROM " + s + ".dlock_locks AS l "
                + "WHERE l.key OPERATOR(pg_catalog.=) " + KEY + " AND pg_catalog.isfinite(l.expires_at))";

        acquire = SqlText.of("SELECT " + s + ".dlock_acquire(" + KEY + ", " + OWNER + ", " + TTL + ", "
                + seconds("$4") + "), " + CLOCKS);
        tryAcquire = SqlText.of("SELECT t.fence, " + CLOCKS + ", pg_catalog.date_part('epoch', t.retry_after) "
                + "FROM " + s + ".dlock_try_acquire(" + KEY + ", " + OWNER + ", " + TTL + ", " + seconds("$4") + ") AS t");
        acquireDelayed = waiting(delayed(s, seconds("$4"), seconds("$5")));
        tryDelayed = trying(delayed(s, NO_WAIT, seconds("$4")), retryAfter);
        acquireShared = waiting(shared(s, seconds("$4"), "$5", seconds("$6")));
        tryShared = trying(shared(s, NO_WAIT, "$4", seconds("$5")), retryAfter);
        campaign = waiting(campaign(s, "$4", seconds("$5"), seconds("$6")));
        tryCampaign = trying(campaign(s, "$4", NO_WAIT, seconds("$5")), retryAfter);
        acquireAll = SqlText.of("SELECT " + s + ".dlock_acquire_all($1::pg_catalog.text[], " + OWNER + ", " + TTL + ", "
                + seconds("$4") + ", " + seconds("$5") + "), " + CLOCKS);
        renew = SqlText.of("SELECT " + s + ".dlock_renew(" + KEY + ", " + OWNER + ", " + TTL + ")");
        release = SqlText.of("SELECT " + s + ".dlock_release(" + KEY + ", " + OWNER + ")");
        holds = SqlText.of("SELECT " + s + ".dlock_holds(" + KEY + ", $2::pg_catalog.int8)");
        holdsAll = SqlText.of("SELECT pg_catalog.bool_and(h) "
                + "FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.int8[])) "
                + "AS t(k, f), LATERAL " + s + ".dlock_holds(t.k, t.f) AS h");
        forceRelease = SqlText.of("SELECT " + s + ".dlock_force_release(" + KEY + ")");
        leader = SqlText.of("SELECT l.info, l.term, l.since, "
                + "CASE WHEN pg_catalog.isfinite(l.expires_at) THEN l.expires_at END "
                + "FROM " + s + ".dlock_leader(" + KEY + ") AS l");
        isFree = SqlText.of("SELECT " + s + ".dlock_wait_free(" + KEY + ", " + NO_WAIT + "), " + retryAfter);
        watch = SqlText.of("SELECT " + s + ".dlock_watch(" + KEY + ")");
        unwatch = SqlText.of("SELECT " + s + ".dlock_unwatch(" + KEY + ")");
    }

    /**
     * {@code name} as an SQL identifier: always double-quoted, inner quotes doubled.
     *
     * @param name a schema name
     * @return the quoted identifier
     */
    public static String quoteIdentifier(String name) {
        return '"' + name.replace("\"", "\"\"") + '"';
    }

    private static String seconds(String parameter) {
        return "pg_catalog.make_interval(secs => " + parameter + "::pg_catalog.float8)";
    }

    private static SqlText waiting(String call) {
        return SqlText.of("SELECT " + call + ", " + CLOCKS);
    }

    private static SqlText trying(String call, String retryAfter) {
        return SqlText.of("SELECT t.f, " + CLOCKS + ", CASE WHEN t.f IS NULL THEN " + retryAfter + " END FROM "
                + call + " AS t(f)");
    }

    private static String delayed(String s, String wait, String delay) {
        return s + ".dlock_acquire(" + KEY + ", " + OWNER + ", " + TTL + ", " + wait + ", " + delay + ")";
    }

    private static String shared(String s, String wait, String permits, String delay) {
        return s + ".dlock_acquire_shared(" + KEY + ", " + OWNER + ", " + TTL + ", " + wait + ", " + permits
                + "::pg_catalog.int4, " + delay + ")";
    }

    private static String campaign(String s, String info, String wait, String delay) {
        return s + ".dlock_campaign(" + KEY + ", " + OWNER + ", " + TTL + ", " + info + "::pg_catalog.text, " + wait
                + ", " + delay + ")";
    }
}
