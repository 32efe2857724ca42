package dev.dlock.client.waiting;

import dev.dlock.client.sql.Statements;
import java.sql.SQLException;

/**
 * A key watched for its own sake rather than by a wait for a lease (an election's observer, a
 * wait for a key to be free). Look at the key, then {@link #changed} sleeps until it may have
 * changed; look again.
 */
public final class Watched implements AutoCloseable {
    private final Waits waits;
    private final KeyLine line;
    private final Statements statements;
    private long seen;

    Watched(Waits waits, KeyLine line, Statements statements) throws SQLException, InterruptedException {
        this.waits = waits;
        this.line = line;
        this.statements = statements;
        this.seen = line.changes();
        try {
            waits.watch(line, statements, Deadline.never());
        } catch (SQLException | InterruptedException | RuntimeException e) {
            close();
            throw e;
        }
    }

    /**
     * Sleeps until a notification for the key (or the loss of the listener) or {@code nanos},
     * then makes sure the key is watched again.
     *
     * @param nanos the longest sleep
     * @throws SQLException if watching again failed
     * @throws InterruptedException if interrupted
     */
    public void changed(long nanos) throws SQLException, InterruptedException {
        line.awaitChange(seen, nanos);
        seen = line.changes();
        waits.watch(line, statements, Deadline.never());
    }

    /** Leaves the key's line (the last one out stops watching it). */
    @Override
    public void close() {
        waits.leave(line, statements);
    }
}
