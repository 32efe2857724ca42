package dev.dlock.client;

import dev.dlock.client.sql.Statements;
import dev.dlock.client.waiting.Attempt;
import dev.dlock.client.waiting.Deadline;
import dev.dlock.client.waiting.KeyLine;
import dev.dlock.client.waiting.Tried;
import dev.dlock.client.waiting.Waits;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CancellationException;

/**
 * Taking one single-key lease: one acquire statement when no wait is asked for; otherwise a wait
 * made of short tries that holds no pooled connection between them (see {@link Waits}).
 */
final class Acquisition {
    static final String SESSION_BOUND_BEHIND_POOLER = "a session-bound lease through a transaction pooler: its "
            + "session would be whichever server connection the pooler lent for the call, which neither ends "
            + "with this client nor carries its later calls; give the lease a ttl";

    private final Core core;
    private final Request request;
    /** How long to wait; {@code null}: without limit. */
    private final Duration wait;
    /** How often the watchdog renews; 0: never (the lease only runs out). */
    private final long renewEveryNanos;

    Acquisition(Core core, Request request, Duration wait, long renewEveryNanos) {
        this.core = core;
        this.request = request;
        this.wait = wait;
        this.renewEveryNanos = renewEveryNanos;
    }

    /** The lease, or {@code null} when another owner keeps the key (within the wait). */
    Lease take() {
        if (request.ttlSeconds() == null && core.connections.transactionPooler()) {
            throw new UnsupportedOperationException("dlock: " + SESSION_BOUND_BEHIND_POOLER);
        }
        Statements statements = core.statements();
        if (wait != null && wait.isZero()) {
            return send(request.waiting(statements, 0.0), statements, false).granted();
        }
        Deadline deadline = wait == null ? Deadline.never() : Deadline.after(wait);
        Waits waits = core.waits;
        Attempt<Lease> attempt = settle -> send(request.trying(statements, settle), statements, true);
        // Nobody of ours in line for the key: one try is all it takes when it is free.
        if (!waits.hasLine(request.key())) {
            Tried<Lease> first = attempt.attempt(waits.settle(deadline));
            if (first.isGrant()) {
                return first.granted();
            }
        }
        KeyLine line = waits.enter(request.key());
        try {
            return waits.waitInLine(line, deadline, statements, attempt);
        } catch (SQLException e) {
            throw SqlErrors.map(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancellationException("dlock: interrupted while waiting for '" + request.key() + "'");
        } finally {
            waits.leave(line, statements);
        }
    }

    /** One acquire statement on a pooled connection; a session-bound grant keeps the connection. */
    private Tried<Lease> send(Request.Call call, Statements statements, boolean tried) {
        Connections connections = core.connections;
        Connection connection = connections.take();
        boolean kept = false;
        boolean broken = false;
        try {
            long sent = System.nanoTime();
            Answer answer = connections.run(connection, call.sql(), rows -> Answer.read(rows, tried), call.params());
            if (answer.fence == null) {
                return Tried.busy(answer.retryAfterSeconds);
            }
            boolean sessionBound = request.ttlSeconds() == null;
            Lease lease = new Lease(core, statements, request.owner(), request.key(), answer.fence,
                    request.ttlSeconds(), sessionBound ? connection : null);
            lease.start(sent, answer.serverElapsedNanos(), answer.serverClock(), renewEveryNanos);
            kept = sessionBound;
            return Tried.grant(lease);
        } catch (ConnectionFailedException e) {
            broken = true;
            throw e;
        } finally {
            if (!kept) {
                connections.giveBack(connection, broken);
            }
        }
    }

    /** An acquire's row: the fence or NULL, the server's clock just after the grant, the
     *  statement's start (epoch seconds), and (for a try) seconds until the blocking lease expires. */
    record Answer(Long fence, double serverNow, double statementStart, Double retryAfterSeconds) {
        static Answer read(ResultSet rows, boolean tried) throws SQLException {
            if (!rows.next()) {
                return new Answer(null, Double.NaN, Double.NaN, null);
            }
            long fence = rows.getLong(1);
            Long granted = rows.wasNull() ? null : fence;
            Double retryAfter = null;
            if (tried && granted == null) {
                double seconds = rows.getDouble(4);
                retryAfter = rows.wasNull() ? null : seconds;
            }
            return new Answer(granted, rows.getDouble(2), rows.getDouble(3), retryAfter);
        }

        /** Nanoseconds from the server receiving the statement to the grant (waits included). */
        long serverElapsedNanos() {
            double elapsed = serverNow - statementStart;
            return Double.isNaN(elapsed) ? 0 : Math.max((long) (elapsed * 1e9), 0);
        }

        /** The server's clock just after the grant, to the microsecond. */
        Instant serverClock() {
            if (Double.isNaN(serverNow)) {
                return null;
            }
            long micros = Math.round(serverNow * 1e6);
            return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000), Math.floorMod(micros, 1_000_000) * 1_000L);
        }
    }
}
