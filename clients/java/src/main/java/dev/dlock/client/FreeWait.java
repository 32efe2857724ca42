package dev.dlock.client;

import dev.dlock.client.sql.Statements;
import dev.dlock.client.waiting.Backoff;
import dev.dlock.client.waiting.Deadline;
import dev.dlock.client.waiting.Tried;
import dev.dlock.client.waiting.Waits;
import dev.dlock.client.waiting.Watched;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.CancellationException;

/**
 * {@link Dlock#waitFree}: looks at the key in short calls, sleeping in between on the client's
 * listener (or, behind a transaction pooler, after growing pauses), never taking the key and
 * never holding a pooled connection while it sleeps.
 */
final class FreeWait {
    private final Core core;
    private final String key;
    /** How long; {@code null}: without limit. */
    private final Duration timeout;

    FreeWait(Core core, String key, Duration timeout) {
        this.core = core;
        this.key = key;
        this.timeout = timeout;
    }

    boolean await() {
        Statements statements = core.statements();
        if (timeout != null && timeout.isZero()) {
            return look(statements).isGrant();
        }
        Deadline deadline = timeout == null ? Deadline.never() : Deadline.after(timeout);
        try {
            if (!core.waits.listens()) {
                return Waits.retry(deadline, core.waits.maxPollNanos(), settle -> look(statements)) != null;
            }
            try (Watched watched = core.waits.watched(key, statements)) {
                Backoff soon = new Backoff(Backoff.DEFAULT_MAX_NANOS);
                while (true) {
                    Tried<Boolean> looked = look(statements);
                    if (looked.isGrant()) {
                        return true;
                    }
                    if (deadline.passed()) {
                        return false;
                    }
                    watched.changed(deadline.cap(Waits.pause(looked.retryAfterSeconds(), soon)));
                }
            }
        } catch (SQLException e) {
            throw SqlErrors.map(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancellationException("dlock: interrupted while waiting for '" + key + "' to be free");
        }
    }

    /** Whether the key is free now (a "grant"), or when its earliest lease expires. */
    private Tried<Boolean> look(Statements statements) {
        try {
            return core.connections.one(statements.isFree, FreeWait::read, key);
        } catch (HeldHereException e) {
            if (!core.connections.transactionPooler()) {
                throw e;
            }
            // Behind a transaction pooler the session that looked is whichever the pooler lent,
            // maybe one that took a lease of the key for another client: held, no more.
            return Tried.busy(null);
        }
    }

    private static Tried<Boolean> read(ResultSet rows) throws SQLException {
        rows.next();
        if (rows.getBoolean(1)) {
            return Tried.grant(Boolean.TRUE);
        }
        double seconds = rows.getDouble(2);
        return Tried.busy(rows.wasNull() ? null : seconds);
    }
}
