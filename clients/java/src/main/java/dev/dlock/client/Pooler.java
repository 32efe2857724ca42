package dev.dlock.client;

/** What stands between the client and PostgreSQL. */
public enum Pooler {
    /** Nothing, or a pooler in session mode: every feature works. */
    SESSION,
    /**
     * pgbouncer (or the like) in transaction mode: nothing is prepared on the server, waits retry
     * after growing, jittered pauses instead of listening (no notification passes the pooler), and
     * session-bound leases and observing an election are refused.
     */
    TRANSACTION
}
