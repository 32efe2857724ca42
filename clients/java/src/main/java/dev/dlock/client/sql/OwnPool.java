package dev.dlock.client.sql;

import java.sql.Connection;
import java.sql.Driver;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.util.Deque;
import java.util.Properties;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * The client's own small pool, for a client made from a JDBC URL: at most {@code size}
 * connections, opened on first need (none before the first call), reused last-in first-out, and
 * dropped when a statement on them failed as if the session were gone. Applications that have a
 * pool already hand it over instead ({@link DataSourceConnections}).
 */
public final class OwnPool implements ConnectionSource {
    /** How long a call waits for a free connection before it fails. */
    public static final long TAKE_TIMEOUT_SECONDS = 30;

    private final Driver driver = new org.postgresql.Driver();
    private final String url;
    private final Properties properties;
    private final Semaphore slots;
    private final Deque<Connection> idle = new ConcurrentLinkedDeque<>();
    private volatile boolean closed;

    /**
     * A pool of connections to {@code url}.
     *
     * @param url a {@code jdbc:postgresql:} URL
     * @param properties connection properties (user, password, ...), beside the URL's own
     * @param size the most connections open at once
     */
    public OwnPool(String url, Properties properties, int size) {
        this.url = url;
        this.properties = properties;
        // Not fair: a fair semaphore hands over under contention, which costs more than it gives.
        this.slots = new Semaphore(size);
    }

    @Override
    public Connection take() throws SQLException {
        if (closed) {
            throw new SQLTransientConnectionException("dlock: the client is closed", "08003");
        }
        try {
            if (!slots.tryAcquire(TAKE_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
                throw new SQLTransientConnectionException(
                        "dlock: no pooled connection was free within " + TAKE_TIMEOUT_SECONDS + " s", "08004");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SQLTransientConnectionException("dlock: interrupted while waiting for a connection", "08004", e);
        }
        try {
            Connection reused = idle.pollFirst();
            return reused != null ? reused : openUnpooled();
        } catch (SQLException | RuntimeException e) {
            slots.release();
            throw e;
        }
    }

    @Override
    public void giveBack(Connection connection, boolean broken) {
        try {
            if (broken || closed || connection.isClosed() || !connection.getAutoCommit()) {
                quietlyClose(connection);
            } else {
                idle.addFirst(connection);
                if (closed && idle.remove(connection)) {
                    quietlyClose(connection);
                }
            }
        } catch (SQLException e) {
            quietlyClose(connection);
        } finally {
            slots.release();
        }
    }

    /**
     * A connection of the pool's settings that the pool does not count (the listener's).
     *
     * @return a new connection, in autocommit
     * @throws SQLException if connecting failed
     */
    public Connection openUnpooled() throws SQLException {
        Connection connection = driver.connect(url, properties);
        if (connection == null) {
            throw new SQLException("dlock: not a PostgreSQL JDBC URL: " + url, "08001");
        }
        connection.setAutoCommit(true);
        return connection;
    }

    @Override
    public void close() {
        closed = true;
        Connection connection;
        while ((connection = idle.pollFirst()) != null) {
            quietlyClose(connection);
        }
    }

    private static void quietlyClose(Connection connection) {
        try {
            connection.close();
        } catch (SQLException e) {
            // Gone already.
        }
    }
}
